package scan

// PagesHeld returns the page tokens e holds: LIST pages being read or evaluated.
func PagesHeld(e *Engine) int { return len(e.pages) }
