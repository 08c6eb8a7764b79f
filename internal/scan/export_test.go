package scan

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
)

// PagesHeld returns the page tokens e holds: LIST pages being read or evaluated.
func PagesHeld(e *Engine) int { return len(e.pages) }

// SetSleep replaces the wait between retries of e; call it before Start.
func SetSleep(e *Engine, sleep func(ctx context.Context, d time.Duration)) { e.sleep = sleep }

// ReadErrorResult is the error result of a policy for a resource that cannot be read.
func ReadErrorResult(p audit.Policy, gvr schema.GroupVersionResource, kind, msg string) audit.Result {
	return readErrorResult(p, gvr, kind, msg)
}
