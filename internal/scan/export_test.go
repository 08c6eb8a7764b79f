package scan

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
)

// PagesHeld returns the page tokens e holds: LIST pages being read or evaluated.
func PagesHeld(e *Scanner) int { return len(e.pages) }

// SetSleep replaces the wait between retries of e; call it before Start.
func SetSleep(e *Scanner, sleep func(ctx context.Context, d time.Duration)) { e.sleep = sleep }

// ResourceResult is the result of a policy about a resource as a whole: one that cannot be read, or is
// withheld.
func ResourceResult(p audit.Policy, gvr schema.GroupVersionResource, kind string, verdict audit.Verdict, msg string) audit.Result {
	return resourceResult(p, gvr, kind, verdict, msg)
}
