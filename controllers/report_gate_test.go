package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// frozenQueue is a report controller's queue whose clock never moves: a request added after a delay is never
// handed out, so a namespace is reconciled again only when an event enqueues it. It records, by namespace, the
// delays asked for and the reconciles done.
type frozenQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	mu         sync.Mutex
	delays     map[string][]time.Duration
	reconciled map[string]int
}

func newFrozenQueue(clk *clocktesting.FakeClock, rateLimiter workqueue.TypedRateLimiter[reconcile.Request]) *frozenQueue {
	return &frozenQueue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(rateLimiter,
			workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clk}),
		delays:     map[string][]time.Duration{},
		reconciled: map[string]int{},
	}
}

func (q *frozenQueue) AddAfter(req reconcile.Request, d time.Duration) {
	q.mu.Lock()
	q.delays[req.Namespace] = append(q.delays[req.Namespace], d)
	q.mu.Unlock()
	q.TypedRateLimitingInterface.AddAfter(req, d)
}

// Done is called once the reconcile of req has returned and its result (a delay or none) is queued.
func (q *frozenQueue) Done(req reconcile.Request) {
	q.mu.Lock()
	q.reconciled[req.Namespace]++
	q.mu.Unlock()
	q.TypedRateLimitingInterface.Done(req)
}

// reconcilesOf returns the reconciles of namespace done, and the delays they asked for.
func (q *frozenQueue) reconcilesOf(namespace string) (int, []time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.reconciled[namespace], slices.Clone(q.delays[namespace])
}

// waitReconciled waits until a reconcile of namespace has returned, and returns the delays asked for.
func (q *frozenQueue) waitReconciled(t *testing.T, namespace string) []time.Duration {
	t.Helper()
	var delays []time.Duration
	envtestutil.Eventually(t, 10*time.Second, func() error {
		var n int
		if n, delays = q.reconcilesOf(namespace); n == 0 {
			return fmt.Errorf("%s not reconciled yet", namespace)
		}
		return nil
	})
	return delays
}

// startFrozenReports runs r, with a new Notifier, as the only controller of a manager that sees celaudit's
// reports in namespace and no others, on a frozenQueue whose clock is r's. It returns the queue and the
// notifier.
func startFrozenReports(t *testing.T, r *controllers.ReportReconciler, namespace string) (*frozenQueue, *controllers.Notifier) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	managed := map[string]string{report.ManagedByLabel: report.ManagedByValue}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 controllers.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{namespace: {}},
			ByObject: map[client.Object]cache.ByObject{
				&v1alpha2.PolicyReport{}: {Label: labels.SelectorFromSet(managed), Transform: report.ForCache},
				// None: those other tests left are none of this one's business.
				&v1alpha2.ClusterPolicyReport{}: {Field: fields.OneTermEqualSelector("metadata.name", "none")},
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	queues := make(chan *frozenQueue, 1)
	notifier := controllers.NewNotifier()
	r.Client, r.APIReader, r.Events, r.Notifier, r.Clock = mgr.GetClient(), mgr.GetAPIReader(), events.NewFakeRecorder(10), notifier, clk
	err = r.SetupWithManager(mgr, func(b *ctrl.Builder) *ctrl.Builder {
		return b.WithOptions(controller.Options{
			SkipNameValidation: ptr.To(true),
			NewQueue: func(_ string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
				q := newFrozenQueue(clk, rl)
				queues <- q
				return q
			},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager stopped with error: %v", err)
		}
	})
	select {
	case q := <-queues:
		return q, notifier
	case <-time.After(10 * time.Second):
		t.Fatal("the report controller has not started")
		return nil, nil
	}
}

// failIn holds one failed result, on the ConfigMap x of namespace: "fail x: m".
func failIn(namespace string) staticResults {
	return staticResults{{Policy: "p", Verdict: audit.Fail, Message: "m",
		Resource: audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: namespace, Name: "x", UID: "u"}}}
}

// A namespace whose results change before the first audit completes is written when it completes, and is not
// looked at in between: its reconcile asks for no retry, and no timer of the queue can fire.
func TestFirstAuditCompletionWritesWaitingNamespace(t *testing.T) {
	const ns = "gate-first-audit"
	create(t, namespace(ns))
	var audited atomic.Bool
	r := &controllers.ReportReconciler{Results: failIn(ns), Ready: audited.Load, Coalesce: time.Second, MaxHold: time.Minute}
	q, notifier := startFrozenReports(t, r, ns)

	notifier.Notify(ns)
	if delays := q.waitReconciled(t, ns); len(delays) != 0 {
		t.Fatalf("a reconcile of %s before the first audit completed asked to be retried after %v", ns, delays)
	}
	expectReport(t, ns, 0) // nothing published

	audited.Store(true)
	notifier.Recheck() // as the scanner does when it settles
	expectReport(t, ns, 0, "fail x: m")
}

// A write held by a rescan goes as soon as the rescan ends, not when MaxHold ends the hold: the queue's clock
// never reaches MaxHold.
func TestRescanEndWritesHeldNamespace(t *testing.T) {
	const ns = "gate-rescan"
	create(t, namespace(ns))
	var rescanning atomic.Bool
	rescanning.Store(true)
	r := &controllers.ReportReconciler{Results: failIn(ns), Ready: func() bool { return true }, Rescanning: rescanning.Load,
		Coalesce: time.Second, MaxHold: time.Minute}
	q, notifier := startFrozenReports(t, r, ns)

	notifier.Notify(ns)
	if delays := q.waitReconciled(t, ns); !slices.Equal(delays, []time.Duration{time.Minute}) {
		t.Fatalf("the reconcile of %s during a rescan asked to be retried after %v, want once, after MaxHold (1m)", ns, delays)
	}
	expectReport(t, ns, 0) // held

	rescanning.Store(false)
	notifier.Recheck() // as the scanner does when it settles
	expectReport(t, ns, 0, "fail x: m")
}
