package scan

import (
	"context"
	"time"
)

// PagesHeld returns the page tokens e holds: LIST pages being read or evaluated.
func PagesHeld(e *Engine) int { return len(e.pages) }

// SetSleep replaces the wait between retries of e; call it before Start.
func SetSleep(e *Engine, sleep func(ctx context.Context, d time.Duration)) { e.sleep = sleep }
