package controllers

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Notifier collects the namespaces whose results changed and feeds them to the report reconcilers' queues,
// one per report API. It is also told when the audit may have settled (the scanner settled, the start-up gate
// opened), which the writes waiting for the first audit or a rescan wait for: each queue then gets every
// namespace marked dirty. Notify and Recheck never block, so the result store can call Notify under its lock.
//
// It is made before anything that changes results, so what follows the audit (readiness, the first audit's
// end, the removal of retired reports) subscribes to it with OnNotify and OnRecheck once it is made.
type Notifier struct {
	mu sync.Mutex
	// subscribers are the queues fed, one per Source: each takes the changes on its own, so a reconciler
	// that falls behind does not hold another back.
	subscribers []*subscriber
	// onNotify are called on each Notify, onRecheck on each Recheck.
	onNotify, onRecheck hooks
}

// hooks are functions called after an event, outside the notifier's lock; they must not block.
type hooks []func()

func (h hooks) run() {
	for _, f := range h {
		f()
	}
}

// subscriber is what one Source has yet to take.
type subscriber struct {
	dirty   map[string]struct{}
	recheck bool
	signal  chan struct{}
}

// NewNotifier returns an empty notifier.
func NewNotifier() *Notifier {
	return &Notifier{}
}

// Notify marks a namespace ("" for cluster-scoped objects) as changed.
func (n *Notifier) Notify(namespace string) {
	n.mu.Lock()
	for _, s := range n.subscribers {
		s.dirty[namespace] = struct{}{}
		s.wake()
	}
	calls := n.onNotify
	n.mu.Unlock()
	calls.run()
}

// OnNotify registers f to be called on each Notify: what follows every change of the results learns it then.
// The result store calls Notify under its lock, so f must not block.
func (n *Notifier) OnNotify(f func()) {
	n.mu.Lock()
	n.onNotify = append(n.onNotify, f)
	n.mu.Unlock()
}

// Recheck enqueues every namespace marked dirty: the first audit completed, or a rescan ended, which the
// writes of those namespaces may wait for.
func (n *Notifier) Recheck() {
	n.mu.Lock()
	for _, s := range n.subscribers {
		s.recheck = true
		s.wake()
	}
	calls := n.onRecheck
	n.mu.Unlock()
	calls.run()
}

// OnRecheck registers f to be called on each Recheck: what waits for the first audit to complete, besides
// the report writes, learns it then. f must not block.
func (n *Notifier) OnRecheck(f func()) {
	n.mu.Lock()
	n.onRecheck = append(n.onRecheck, f)
	n.mu.Unlock()
}

func (s *subscriber) wake() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// take returns the namespaces notified to s since it last ran, and whether Recheck was called since.
func (n *Notifier) take(s *subscriber) (changed []string, recheck bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	changed = make([]string, 0, len(s.dirty))
	for ns := range s.dirty {
		changed = append(changed, ns)
	}
	clear(s.dirty)
	recheck, s.recheck = s.recheck, false
	return changed, recheck
}

// Source returns a controller source that records each changed namespace with mark and enqueues it, and on
// Recheck enqueues each namespace of dirty(). The queue keeps one entry per namespace, so a namespace is
// never queued twice; the reconciler decides when its reports are written. Changes are collected from the
// call on, so that none is lost before the controller starts.
func (n *Notifier) Source(mark func(namespace string), dirty func() []string) source.Source {
	s := &subscriber{dirty: map[string]struct{}{}, signal: make(chan struct{}, 1)}
	n.mu.Lock()
	n.subscribers = append(n.subscribers, s)
	n.mu.Unlock()
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-s.signal:
					changed, recheck := n.take(s)
					for _, ns := range changed {
						mark(ns)
						q.Add(reportRequest(ns))
					}
					if recheck {
						for _, ns := range dirty() {
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
