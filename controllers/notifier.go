package controllers

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Notifier collects the namespaces whose results changed and feeds them, coalesced, to the report
// reconciler's queue. Notify never blocks, so the result store can call it under its lock.
type Notifier struct {
	mu     sync.Mutex
	dirty  map[string]struct{}
	signal chan struct{}
}

// NewNotifier returns an empty notifier.
func NewNotifier() *Notifier {
	return &Notifier{dirty: map[string]struct{}{}, signal: make(chan struct{}, 1)}
}

// Notify marks a namespace ("" for cluster-scoped objects) as changed.
func (n *Notifier) Notify(namespace string) {
	n.mu.Lock()
	n.dirty[namespace] = struct{}{}
	n.mu.Unlock()
	select {
	case n.signal <- struct{}{}:
	default:
	}
}

func (n *Notifier) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.dirty))
	for ns := range n.dirty {
		out = append(out, ns)
	}
	clear(n.dirty)
	return out
}

// Source returns a controller source that enqueues each changed namespace after delay(namespace). The queue
// keeps one entry per namespace and the earliest due time, so a namespace is never queued twice.
func (n *Notifier) Source(delay func(namespace string) time.Duration) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-n.signal:
					for _, ns := range n.take() {
						if d := delay(ns); d > 0 {
							q.AddAfter(reportRequest(ns), d)
						} else {
							q.Add(reportRequest(ns))
						}
					}
				}
			}
		}()
		return nil
	})
}

func reportRequest(namespace string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: reportKeyName}}
}

// reportKeyName is the name in every report request: the reconciler works per namespace, not per report.
const reportKeyName = "celaudit"
