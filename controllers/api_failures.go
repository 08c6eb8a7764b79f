package controllers

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// failureCause is why a write to the API server failed, as far as what follows is concerned: each cause is
// logged once when it begins and once when it ends, however many writes fail meanwhile.
type failureCause string

// causeUnreachable is the cause of writes that never got an answer: the API server is down, restarting or
// cut off. Nothing but waiting helps, and its end is learned by asking the API server whether it is ready.
const causeUnreachable failureCause = "the API server is unreachable"

// causeOf classifies err. Connection errors, timeouts and 503s are causeUnreachable; an answer of the API
// server is its reason (Forbidden, TooManyRequests, ...); anything else is "other".
func causeOf(err error) failureCause {
	var netErr net.Error
	switch {
	case utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err),
		utilnet.IsHTTP2ConnectionLost(err), utilnet.IsTimeout(err), errors.As(err, &netErr),
		apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return causeUnreachable
	}
	if reason := apierrors.ReasonForError(err); reason != "" {
		return failureCause("the API server refuses: " + string(reason))
	}
	return "other"
}

// writeBackoff is the wait before the writes of one namespace are retried after failures failed attempts in
// a row: 1 s doubled for each further failure, at most 30 s. An API server that is down for a minute then
// sees each namespace's writes a handful of times, not sixty.
func writeBackoff(failures int) time.Duration {
	const first, most = time.Second, 30 * time.Second
	d := first
	for i := 1; i < failures && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

// apiFailures is what the operator knows of its failed writes to the API server, across every writer (the
// reports of each API, AuditPolicies). It logs each cause of each writer's failures once when it begins, with its first error, and once when it ends,
// with how many writes failed and for how long: an API server that is down for a minute is two log lines,
// not one error with a stack trace per namespace each second. While the API server is unreachable it asks
// it whether it is ready, each ProbeInterval, so that the writes waiting for it go as soon as it is back
// rather than when their backoff ends; a write that succeeds ends every cause too.
type apiFailures struct {
	Log logr.Logger
	// Ready asks the API server whether it is ready (GET /readyz, which every client may read).
	Ready         func(ctx context.Context) error
	ProbeInterval time.Duration

	mu     sync.Mutex
	causes map[failingWrites]*failureSpell
	// recovered are called, outside the lock, when the causes end: writers retry at once.
	recovered hooks
	// probe wakes the prober when the API server becomes unreachable.
	probe chan struct{}
}

// failingWrites are the writes of one kind (reports, AuditPolicies) that fail for one cause.
type failingWrites struct {
	what  string
	cause failureCause
}

// failureSpell is one cause's run of failures.
type failureSpell struct {
	since    time.Time
	failures int
}

func newAPIFailures(log logr.Logger, ready func(ctx context.Context) error) *apiFailures {
	return &apiFailures{Log: log, Ready: ready, ProbeInterval: time.Second, causes: map[failingWrites]*failureSpell{},
		probe: make(chan struct{}, 1)}
}

// OnRecovered registers f to be called when writes may succeed again. f must not block.
func (f *apiFailures) OnRecovered(fn func()) {
	f.mu.Lock()
	f.recovered = append(f.recovered, fn)
	f.mu.Unlock()
}

// Failed records a failed write of what (e.g. "reports"), logging its cause if it is new, and returns the
// cause.
func (f *apiFailures) Failed(what string, err error) failureCause {
	cause := causeOf(err)
	key := failingWrites{what: what, cause: cause}
	f.mu.Lock()
	spell := f.causes[key]
	isNew := spell == nil
	if isNew {
		spell = &failureSpell{since: time.Now()}
		f.causes[key] = spell
	}
	spell.failures++
	f.mu.Unlock()
	if isNew {
		// Logged without a stack trace (see main.go): where a write failed is in the error; the trace would
		// only show the controller's goroutine.
		f.Log.Error(err, "Writes to the API server fail: retrying with backoff; logged again when they succeed",
			"cause", string(cause), "writing", what)
	}
	if cause == causeUnreachable {
		select {
		case f.probe <- struct{}{}:
		default:
		}
	}
	return cause
}

// Succeeded records that a write succeeded, which ends every cause: each is logged with the failures it
// made, and the writers waiting for their backoff retry at once.
func (f *apiFailures) Succeeded() {
	f.mu.Lock()
	if len(f.causes) == 0 {
		f.mu.Unlock()
		return
	}
	ended := f.causes
	f.causes = map[failingWrites]*failureSpell{}
	calls := f.recovered
	f.mu.Unlock()
	for key, spell := range ended {
		f.Log.Info("Writes to the API server succeed again", "cause", string(key.cause), "writing", key.what,
			"failedWrites", spell.failures, "for", time.Since(spell.since).Round(time.Second).String())
	}
	calls.run()
}

// unreachable reports whether writes currently fail because the API server is unreachable.
func (f *apiFailures) unreachable() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for key := range f.causes {
		if key.cause == causeUnreachable {
			return true
		}
	}
	return false
}

// Start asks the API server whether it is ready, each ProbeInterval while writes fail because it is
// unreachable, until it is or ctx ends. It runs on every replica: only the leader writes, and a replica that
// writes nothing is never woken.
func (f *apiFailures) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.probe:
		}
		f.waitReachable(ctx)
	}
}

// NeedLeaderElection is false: see Start.
func (f *apiFailures) NeedLeaderElection() bool { return false }

// waitReachable probes until the API server answers that it is ready, then ends the causes. It returns
// early when something else ended them (a write succeeded) or ctx ends.
func (f *apiFailures) waitReachable(ctx context.Context) {
	t := time.NewTicker(f.ProbeInterval)
	defer t.Stop()
	for f.unreachable() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, max(f.ProbeInterval, time.Second))
		err := f.Ready(pctx)
		cancel()
		if err == nil {
			f.Succeeded()
			return
		}
	}
}

// backingOff wraps a reconciler whose writes to the API server may fail while it is unreachable or refuses
// them: such a failure is logged once per cause by Failures and retried after a backoff per request that
// grows with each failure in a row (see writeBackoff), instead of being returned, which logs it on every
// retry. Other errors are returned as they are. A reconcile that succeeds resets its request's backoff and
// ends the causes. When the causes end (the API server answers again, or any write succeeds), the requests
// waiting for their backoff are enqueued at once with their backoff reset, as report writes are: an API
// server that was down for a minute must not leave a policy waiting 30 s more.
type backingOff struct {
	reconcile.TypedReconciler[reconcile.Request]
	Failures *apiFailures
	// What names the writes in the log, e.g. "AuditPolicy status".
	What string

	// queue is the controller's work queue, once it started (see Source).
	queue    atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]
	mu       sync.Mutex
	failures map[reconcile.Request]int // failed reconciles in a row, by request
}

// newBackingOff wraps r, retrying its requests at once when failures end. Source must be watched by r's
// controller.
func newBackingOff(r reconcile.Reconciler, failures *apiFailures, what string) *backingOff {
	b := &backingOff{TypedReconciler: r, Failures: failures, What: what}
	failures.OnRecovered(b.retryNow)
	return b
}

// Source is a source of no events that hands b its controller's queue, into which retryNow enqueues.
func (b *backingOff) Source() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		b.queue.Store(&q)
		return nil
	})
}

// retryNow enqueues every request waiting for its backoff and resets its backoff. It does not block.
func (b *backingOff) retryNow() {
	q := b.queue.Load()
	if q == nil {
		return
	}
	b.mu.Lock()
	waiting := make([]reconcile.Request, 0, len(b.failures))
	for req := range b.failures {
		waiting = append(waiting, req)
	}
	clear(b.failures)
	b.mu.Unlock()
	for _, req := range waiting {
		(*q).Add(req)
	}
}

var _ reconcile.Reconciler = &backingOff{}

// Reconcile runs the wrapped reconciler and backs off from its API failures.
func (b *backingOff) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := b.TypedReconciler.Reconcile(ctx, req)
	if err == nil {
		b.mu.Lock()
		delete(b.failures, req)
		b.mu.Unlock()
		b.Failures.Succeeded()
		return res, nil
	}
	if ctx.Err() != nil || causeOf(err) == "other" {
		return res, err
	}
	b.Failures.Failed(b.What, err)
	b.mu.Lock()
	if b.failures == nil {
		b.failures = map[reconcile.Request]int{}
	}
	b.failures[req]++
	wait := writeBackoff(b.failures[req])
	b.mu.Unlock()
	ctrl.LoggerFrom(ctx).V(1).Info("Reconcile failed, retrying with backoff", "err", err.Error(), "after", wait)
	return reconcile.Result{RequeueAfter: wait}, nil
}
