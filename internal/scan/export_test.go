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

// ShardModeOf returns how e reads gvr: whether the API server applied its shard selector to the last page.
func ShardModeOf(e *Scanner, gvr schema.GroupVersionResource) ShardMode {
	e.mu.Lock()
	w := e.watchers[gvr]
	e.mu.Unlock()
	if w == nil {
		return ShardNone
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.shardMode
}
