package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/shard"
)

// ResultSource gives the current results of one namespace ("" for cluster-scoped objects): those kept
// whole, and the number of passes kept only as a count.
type ResultSource interface {
	NamespaceCounted(namespace string) (results []audit.Result, passes map[types.UID]int)
}

// ReportReconciler keeps the reports of one namespace (or the cluster-scoped reports) equal to the current
// results, writing only reports whose content changed. It writes the reports of one API: PolicyReports and
// ClusterPolicyReports unless wired otherwise; the operator runs one reconciler per API it publishes in, each
// with what it keeps about its own writes, so that each API's reports are restored on their own.
type ReportReconciler struct {
	Client client.Client
	// APIReader reads from the API server what the cache does not hold: reports celaudit does not own.
	APIReader client.Reader
	// Events records Events where users look, such as on a report that holds a name celaudit would use.
	Events  EventRecorder
	Results ResultSource
	// Ready reports whether the results reflect the whole cluster; until then nothing is written, so a
	// restart never publishes a partial report. Notifier.Recheck is called when it may have become true.
	Ready func() bool
	// Notifier enqueues the namespaces whose results changed, and on Recheck those whose writes wait for the
	// first audit or a rescan.
	Notifier *Notifier
	Options  report.Options
	// Coalesce is the least time between two writes of a namespace's reports: the first change is written at
	// once, changes that follow within Coalesce are batched into one write.
	Coalesce time.Duration
	Clock    clock.Clock
	// Writes, when set, counts the writes by operation.
	Writes *prometheus.CounterVec
	// Rescanning, when set, reports whether a rescan is under way (a policy was edited, a resource is being
	// relisted): writes wait for it to end, up to MaxHold, so that a policy edit lands in one complete write
	// per report rather than a partial one followed by the rest. Notifier.Recheck is called when a rescan
	// ends.
	Rescanning func() bool
	MaxHold    time.Duration
	// Failures logs failed writes once per cause and tells when the API server is back; when unset, one
	// of the reconciler's own logs to ctrl.Log.
	Failures *apiFailures

	gate writeGate // what is kept about each namespace's writes, and when they are written
	// inFlight holds one token per report write under way; its capacity bounds the writes in flight at once,
	// across namespaces, and across the reconcilers of every API when they share it (default
	// defaultWritesInFlight). A namespace with many violations is split into tens of chunks, which a first
	// audit creates together; one limit across namespaces lets its chunks go out while other namespaces have
	// nothing to write.
	inFlight chan struct{}
	// api is the API of the reports written; nil: wgpolicyk8s.io.
	api reportAPI
	// peers are the other APIs celaudit writes the same reports in: a result one of them already publishes
	// keeps its timestamp here, so that both APIs hold the same results, timestamps included.
	peers []reportAPI
	// onCurrent, when set, is told each namespace whose reports were found to hold its results: written, up
	// to date, or left to go with the namespace. The reports of an API no longer written wait for it.
	onCurrent func(namespace string)

	// Shard, when set, is this member's place in a sharded audit: it writes (creates, updates, deletes) the
	// reports of the namespaces it owns only, each report carrying the epoch of its layout, and never over a
	// report written under a higher epoch. Until the layout is known it writes nothing. Nil: unsharded.
	Shard shard.Source
	// Refresh, when set, re-reads the membership: a report written under a higher epoch than this member's
	// says that it changed.
	Refresh func(context.Context) error
}

// +kubebuilder:rbac:groups=wgpolicyk8s.io,resources=policyreports;clusterpolicyreports,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=openreports.io,resources=reports;clusterreports,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile rebuilds the reports of one namespace from the current results and writes the difference, when
// the write gate lets it.
func (r *ReportReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Namespace
	layout, mine := r.owns(ns)
	if !mine {
		// Another member's, or not yet known to be this one's: what was kept about it would only be stale
		// once it is. A layout change enqueues every namespace again.
		r.gate.forget(ns)
		return ctrl.Result{}, nil
	}
	deleting, err := r.namespaceDeleting(ctx, ns)
	if err != nil {
		return ctrl.Result{}, err
	}
	if deleting {
		r.leave(ctx, ns)
		return ctrl.Result{}, nil
	}
	// Marked before the first audit and the rescan are asked about: a namespace waiting for either is then
	// among those Notifier.Recheck enqueues when it ends.
	r.gate.markDirty(ns, r.Clock.Now())
	existing, err := r.existing(ctx, ns)
	if err != nil {
		return ctrl.Result{}, err
	}
	if epoch, newer := newerEpoch(existing, layout); newer {
		return r.superseded(ctx, layout, epoch)
	}
	in := writeInputs{
		now:            r.Clock.Now(),
		existing:       existing,
		firstAuditDone: r.Ready(),
		rescanning:     r.Rescanning != nil && r.Rescanning(),
	}
	if d := r.gate.decide(ns, in, r.limits()); d.wait != writeNow {
		ctrl.LoggerFrom(ctx).V(2).Info("Reports wait", "for", d.wait.String(), "after", d.after)
		return ctrl.Result{RequeueAfter: d.after}, nil
	}
	return r.write(ctx, ns, existing, layout)
}

// owns returns this member's layout and whether it writes the reports of namespace: always when the audit is
// not sharded; in a sharded audit, when its layout is known and owns namespace.
func (r *ReportReconciler) owns(namespace string) (shard.Layout, bool) {
	if r.Shard == nil {
		return shard.Layout{}, true
	}
	l, known := r.Shard.Layout()
	return l, known && l.OwnsNamespace(namespace)
}

// newerEpoch returns the highest epoch of the reports in existing written under a higher one than layout's,
// and whether there is one. Unsharded, there is none.
func newerEpoch(existing report.Reports, layout shard.Layout) (int64, bool) {
	var (
		highest int64
		found   bool
	)
	note := func(m metav1.Object) {
		if e, ok := shard.EpochOf(m); ok && e > layout.Epoch && (!found || e > highest) {
			highest, found = e, true
		}
	}
	for i := range existing.PolicyReports {
		note(&existing.PolicyReports[i])
	}
	for i := range existing.ClusterPolicyReports {
		note(&existing.ClusterPolicyReports[i])
	}
	return highest, found && layout.Sharded()
}

// superseded follows a reconcile that found a report written under epoch, higher than this member's
// layout's: a member of a later layout owns the namespace now, or this member has yet to learn that it
// does. Nothing is written; the membership is read again, whose change enqueues every namespace, and the
// namespace is looked at again after MaxHold should it not change.
func (r *ReportReconciler) superseded(ctx context.Context, layout shard.Layout, epoch int64) (ctrl.Result, error) {
	ctrl.LoggerFrom(ctx).Info("A report was written under a later shard layout: writing nothing, reading the membership again",
		"layout", layout.String(), "reportEpoch", epoch)
	if r.Refresh != nil {
		if err := r.Refresh(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: r.MaxHold}, nil
}

// write builds the reports of namespace from its current results and writes what differs from existing;
// in a sharded audit each carries layout's epoch.
func (r *ReportReconciler) write(ctx context.Context, namespace string, existing report.Reports, layout shard.Layout) (ctrl.Result, error) {
	taken := report.TakenNames(existing, r.gate.takenIn(namespace))
	results, passes := r.Results.NamespaceCounted(namespace)
	opts := r.Options
	opts.Chunks = report.ChunkCounts(existing)
	opts.Taken = taken
	if r.Shard != nil {
		opts.Annotations = layout.Annotations()
	}
	previous, err := r.previousTimestamps(ctx, namespace, existing)
	if err != nil {
		return ctrl.Result{}, err
	}
	desired := report.BuildCounted(results, report.CountedPasses{namespace: passes}, previous, r.Clock.Now(), opts)
	changes := report.Diff(desired, existing)
	if changes.Empty() {
		r.gate.upToDate(namespace)
		r.current(namespace)
		return ctrl.Result{}, nil
	}
	r.gate.wrote(namespace, r.Clock.Now())
	if refused, err := r.apply(ctx, namespace, changes); err != nil {
		return r.writeFailed(ctx, namespace, taken[namespace], refused, err)
	}
	r.gate.published(namespace)
	r.gate.succeeded(namespace)
	r.Failures.Succeeded()
	r.current(namespace)
	ctrl.LoggerFrom(ctx).V(1).Info("Reports written",
		"created", len(changes.PolicyReports.Create)+len(changes.ClusterPolicyReports.Create),
		"updated", len(changes.PolicyReports.Update)+len(changes.ClusterPolicyReports.Update),
		"deleted", len(changes.PolicyReports.Delete)+len(changes.ClusterPolicyReports.Delete))
	return ctrl.Result{}, nil
}

// previousTimestamps returns the timestamps of the results namespace's reports publish, here or in a peer
// API. A result both publish keeps the earlier of its two timestamps: two APIs that first published it in
// different seconds agree on one, and stay equal result for result.
func (r *ReportReconciler) previousTimestamps(ctx context.Context, namespace string, existing report.Reports) (map[string]metav1.Timestamp, error) {
	previous := r.gate.previousTimestamps(namespace, existing)
	for _, p := range r.peers {
		theirs, err := p.list(ctx, r.Client, namespace)
		if err != nil {
			return nil, err
		}
		for id, ts := range report.PreviousTimestamps(theirs) {
			if have, ok := previous[id]; !ok || ts.Seconds < have.Seconds || (ts.Seconds == have.Seconds && ts.Nanos < have.Nanos) {
				previous[id] = ts
			}
		}
	}
	return previous, nil
}

// limits returns the settings that bound how long writes wait.
func (r *ReportReconciler) limits() writeLimits {
	return writeLimits{coalesce: r.Coalesce, maxHold: r.MaxHold}
}

// writeFailed decides what follows writes of namespace's reports that failed with err; taken holds the names
// they avoided.
func (r *ReportReconciler) writeFailed(ctx context.Context, namespace string, taken sets.Set[string], refused refusals, err error) (ctrl.Result, error) {
	switch {
	case refused.terminating: // the cache has yet to show the namespace's deletion
		r.leave(ctx, namespace)
		return ctrl.Result{}, nil
	case len(refused.existed) > 0 || apierrors.IsConflict(err):
		return r.conflicted(ctx, namespace, taken, refused.existed, err)
	}
	return r.retryLater(ctx, namespace, err)
}

// retryLater records writes of namespace's reports that failed with err, which Failures logs once per cause,
// and retries them after a backoff that grows with each failure in a row (see writeBackoff), or as soon as
// the API server is known to be back. Returning err instead would log it, with a stack trace, on every retry,
// and retry each second: the coalescing wait that follows every write resets the queue's own backoff.
func (r *ReportReconciler) retryLater(ctx context.Context, namespace string, err error) (ctrl.Result, error) {
	if ctx.Err() != nil {
		return ctrl.Result{}, ctx.Err()
	}
	cause := r.Failures.Failed("reports", err)
	wait := r.gate.failed(namespace, r.Clock.Now())
	ctrl.LoggerFrom(ctx).V(1).Info("Writing reports failed, retrying with backoff", "cause", string(cause), "err", err.Error(), "after", wait)
	return ctrl.Result{RequeueAfter: wait}, nil
}

// namespaceDeleting reports whether namespace is being deleted, as the cache shows it. A namespace the cache
// does not show is not taken as deleted: it may be new, and writing its reports is what tells.
func (r *ReportReconciler) namespaceDeleting(ctx context.Context, namespace string) (bool, error) {
	if namespace == "" {
		return false, nil
	}
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("getting namespace %s: %w", namespace, err)
	}
	return ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating, nil
}

// leave leaves the reports of namespace, which is being deleted, to go with it: the API server refuses to
// create any there, and the namespace's deletion removes those it holds. Nothing is retried, and what was
// kept about the namespace is forgotten: one created later under its name starts afresh.
func (r *ReportReconciler) leave(ctx context.Context, namespace string) {
	r.gate.forget(namespace)
	r.current(namespace)
	ctrl.LoggerFrom(ctx).V(1).Info("Namespace is being deleted: its reports are left to go with it")
}

// current tells onCurrent that namespace's reports hold its results.
func (r *ReportReconciler) current(namespace string) {
	if r.onCurrent != nil {
		r.onCurrent(namespace)
	}
}

// existing returns the reports celaudit wrote in namespace, as the cache holds them, in the wgpolicyk8s.io
// form: they are not copied (a namespace's reports add up to megabytes when it has thousands of violations),
// so they are read-only. Diff, PreviousTimestamps and ChunkCounts only read them; what Diff returns is its
// own copy.
func (r *ReportReconciler) existing(ctx context.Context, namespace string) (report.Reports, error) {
	return r.api.list(ctx, r.Client, namespace)
}

// refusals are the writes of apply the API server refused for a reason the reconciler acts on.
type refusals struct {
	// terminating is set when a write was refused because the namespace is being deleted.
	terminating bool
	// existed holds the reports whose creation was refused because the name is in use.
	existed []client.Object
}

// apply writes c, the changes to namespace's reports, and records what the cache is then expected to show.
func (r *ReportReconciler) apply(ctx context.Context, namespace string, c report.Changes) (refusals, error) {
	creates, updates, deletes := r.api.writes(c)
	r.count("create", len(creates))
	r.count("update", len(updates))
	r.count("delete", len(deletes))
	// Each write that succeeds is expected in the cache before the namespace is built again: at the
	// resourceVersion it returned, or gone.
	exp := &expectation{reports: map[string]string{}}
	var (
		refused refusals
		expMu   sync.Mutex
	)
	expecting := func(write func(client.Object) error, deletes bool) func(client.Object) error {
		return func(o client.Object) error {
			if err := write(o); err != nil {
				if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
					expMu.Lock()
					refused.terminating = true
					expMu.Unlock()
				}
				return err
			}
			rv := o.GetResourceVersion()
			if deletes {
				rv = ""
			}
			expMu.Lock()
			exp.reports[o.GetName()] = rv
			expMu.Unlock()
			return nil
		}
	}
	create := expecting(func(o client.Object) error {
		err := r.Client.Create(ctx, o)
		if apierrors.IsAlreadyExists(err) {
			expMu.Lock()
			refused.existed = append(refused.existed, o)
			expMu.Unlock()
		}
		return err
	}, false)
	update := expecting(func(o client.Object) error { return r.Client.Update(ctx, o) }, false)
	remove := expecting(func(o client.Object) error {
		return client.IgnoreNotFound(r.Client.Delete(ctx, o, r.deleteOptions(o)...))
	}, true)
	var writes []func() error
	writes = appendWrites(writes, creates, create)
	writes = appendWrites(writes, updates, update)
	writes = appendWrites(writes, deletes, remove)
	err := runBounded(ctx, writes, r.inFlight)
	// MaxHold counts from the end of the writes: a thousand chunks can take longer than that to write, and
	// the cache's lag begins when they are done.
	exp.since = r.Clock.Now()
	r.gate.expect(namespace, exp, err == nil)
	if err != nil {
		return refused, fmt.Errorf("writing reports: %w", err)
	}
	return refused, nil
}

// deleteOptions returns the options of the deletion of o: in a sharded audit, on the condition that o is
// still the report read, so that a report another member wrote since, under a later layout, stays; as
// updates carry their resourceVersion, check and write are one atomic step.
func (r *ReportReconciler) deleteOptions(o client.Object) []client.DeleteOption {
	if r.Shard == nil {
		return nil
	}
	rv := o.GetResourceVersion()
	return []client.DeleteOption{client.Preconditions{ResourceVersion: &rv}}
}

// appendWrites appends op on each of objs to writes.
func appendWrites(writes []func() error, objs []client.Object, op func(client.Object) error) []func() error {
	for _, o := range objs {
		writes = append(writes, func() error { return op(o) })
	}
	return writes
}

// runBounded runs fns, each holding a token of sem, and returns all their errors. Each write is to a
// different report, so their order does not matter.
func runBounded(ctx context.Context, fns []func() error, sem chan struct{}) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = ctx.Err()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// defaultWritesInFlight bounds the report writes in flight.
const defaultWritesInFlight = 32

// reportDeleted keeps the result timestamps of a report of celaudit's that was deleted, until the namespace's
// reports are written again.
func (r *ReportReconciler) reportDeleted(o client.Object) {
	deleted, ok := r.api.asReports(o)
	if !ok {
		return
	}
	timestamps := report.PreviousTimestamps(deleted)
	if len(timestamps) == 0 {
		return
	}
	r.gate.keepRemoved(o.GetNamespace(), timestamps)
}

// markDirty records that namespace's results changed.
func (r *ReportReconciler) markDirty(namespace string) {
	r.gate.markDirty(namespace, r.Clock.Now())
}

func (r *ReportReconciler) count(op string, n int) {
	if r.Writes != nil && n > 0 {
		r.Writes.WithLabelValues(op).Add(float64(n))
	}
}

// defaults fills in the settings left unset.
func (r *ReportReconciler) defaults() {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Coalesce <= 0 {
		r.Coalesce = time.Second
	}
	if r.MaxHold <= 0 {
		r.MaxHold = 10 * time.Second
	}
	if r.inFlight == nil {
		r.inFlight = make(chan struct{}, defaultWritesInFlight)
	}
	if r.api == nil {
		r.api = wgpolicyAPI{}
	}
	if r.Failures == nil {
		r.Failures = newAPIFailures(ctrl.Log.WithName("writes"), nil)
	}
}

// SetupWithManager registers the reconciler: it runs on result changes (from the notifier) and on changes
// to celaudit's own reports of its API, so a report edited or deleted by hand is restored.
func (r *ReportReconciler) SetupWithManager(mgr ctrl.Manager, opts ...func(*ctrl.Builder) *ctrl.Builder) error {
	if r.Client == nil || r.APIReader == nil || r.Events == nil || r.Results == nil || r.Ready == nil || r.Notifier == nil {
		return fmt.Errorf("ReportReconciler needs Client, APIReader, Events, Results, Ready and Notifier")
	}
	r.defaults()
	enqueue := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.Add(reportRequest(o.GetNamespace()))
	}
	toNamespace := handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.reportDeleted(e.Object)
			enqueue(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
	}
	managed := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return report.IsManaged(o) }))
	b := ctrl.NewControllerManagedBy(mgr).Named(r.api.name())
	for _, o := range r.api.objects() {
		b = b.Watches(o, toNamespace, managed)
	}
	// A peer API's writes may carry a result's earlier timestamp (see previousTimestamps): its reports are
	// looked at again then. Nothing is written unless a timestamp differs.
	peerChanged := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{reportRequest(o.GetNamespace())}
	})
	for _, p := range r.peers {
		for _, o := range p.objects() {
			b = b.Watches(o, peerChanged, managed)
		}
	}
	b = b.WatchesRawSource(r.Notifier.Source(r.markDirty, r.gate.dirty))
	for _, o := range opts {
		b = o(b)
	}
	return b.Complete(r)
}
