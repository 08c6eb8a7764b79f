package controllers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/report"
)

// ResultSource gives the current results of one namespace ("" for cluster-scoped objects): those kept
// whole, and the number of passes kept only as a count.
type ResultSource interface {
	NamespaceCounted(namespace string) (results []audit.Result, passes map[types.UID]int)
}

// ReportReconciler keeps the PolicyReports of one namespace (or the ClusterPolicyReports) equal to the
// current results, writing only reports whose content changed.
type ReportReconciler struct {
	Client client.Client
	// APIReader reads from the API server what the cache does not hold: reports celaudit does not own.
	APIReader client.Reader
	// Events records Events where users look, such as on a report that holds a name celaudit would use.
	Events  EventRecorder
	Results ResultSource
	// Ready reports whether the results reflect the whole cluster; until then nothing is written, so a
	// restart never publishes a partial report.
	Ready    func() bool
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
	// per report rather than a partial one followed by the rest.
	Rescanning func() bool
	MaxHold    time.Duration
	// WritesInFlight bounds the report writes in flight at once, across namespaces (default 32). A namespace
	// with many violations is split into tens of chunks, which a first audit creates together; one limit
	// across namespaces lets its chunks go out while other namespaces have nothing to write.
	WritesInFlight int

	mu         sync.Mutex
	namespaces map[string]*namespaceState // by namespace ("" for the cluster)
	inFlight   chan struct{}              // one token per report write under way
}

// namespaceState is what the reconciler keeps about one namespace's report writes.
type namespaceState struct {
	lastWrite  time.Time    // zero: never written
	dirtySince time.Time    // zero: nothing to write
	expected   *expectation // the writes the cache has not shown yet; nil: none
	// taken holds the report names found held by reports celaudit does not own.
	taken sets.Set[string]
	// conflictSince is when writes began to be refused as conflicting with the reports the API server holds;
	// zero: the last writes were not.
	conflictSince time.Time
	// removed holds the result timestamps of the namespace's reports deleted since its last write, by result
	// ID: a report deleted by hand is written again with the times its results last changed, not the time
	// it is written again.
	removed map[string]metav1.Timestamp
}

// expectation is what a namespace's last writes left: each report written, with the resourceVersion the API
// server returned ("" for a report deleted). A reconcile that runs before the cache shows them would build
// its changes against reports that are no longer there, and create again what it just created.
type expectation struct {
	since   time.Time
	reports map[string]string
}

// readyPoll is how often a report waits to see whether the first audit is done.
const readyPoll = 100 * time.Millisecond

// +kubebuilder:rbac:groups=wgpolicyk8s.io,resources=policyreports;clusterpolicyreports,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile rebuilds the reports of one namespace from the current results and writes the difference.
func (r *ReportReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !r.Ready() {
		return ctrl.Result{RequeueAfter: readyPoll}, nil
	}
	deleting, err := r.namespaceDeleting(ctx, req.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if deleting {
		r.leave(ctx, req.Namespace)
		return ctrl.Result{}, nil
	}
	if wait := r.delay(req.Namespace); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if r.hold(req.Namespace) {
		return ctrl.Result{RequeueAfter: readyPoll}, nil
	}
	existing, err := r.existing(ctx, req.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if r.awaitingCache(req.Namespace, existing) {
		return ctrl.Result{RequeueAfter: readyPoll}, nil
	}
	taken := report.TakenNames(existing, r.takenIn(req.Namespace))
	results, passes := r.Results.NamespaceCounted(req.Namespace)
	opts := r.Options
	opts.Chunks = report.ChunkCounts(existing)
	opts.Taken = taken
	desired := report.BuildCounted(results, report.CountedPasses{req.Namespace: passes}, r.previousTimestamps(req.Namespace, existing), r.Clock.Now(), opts)
	changes := report.Diff(desired, existing)
	if changes.Empty() {
		r.upToDate(req.Namespace)
		return ctrl.Result{}, nil
	}
	r.wrote(req.Namespace)
	if refused, err := r.apply(ctx, req.Namespace, changes); err != nil {
		return r.writeFailed(ctx, req.Namespace, taken[req.Namespace], refused, err)
	}
	r.published(req.Namespace)
	ctrl.LoggerFrom(ctx).V(1).Info("Reports written",
		"created", len(changes.PolicyReports.Create)+len(changes.ClusterPolicyReports.Create),
		"updated", len(changes.PolicyReports.Update)+len(changes.ClusterPolicyReports.Update),
		"deleted", len(changes.PolicyReports.Delete)+len(changes.ClusterPolicyReports.Delete))
	return ctrl.Result{}, nil
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
	return ctrl.Result{}, err
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
	r.forget(namespace)
	ctrl.LoggerFrom(ctx).V(1).Info("Namespace is being deleted: its reports are left to go with it")
}

// existing returns the reports celaudit wrote in namespace, as the cache holds them: they are not copied
// (a namespace's reports add up to megabytes when it has thousands of violations), so they are read-only.
// Diff, PreviousTimestamps and ChunkCounts only read them; what Diff returns is its own copy.
func (r *ReportReconciler) existing(ctx context.Context, namespace string) (report.Reports, error) {
	var out report.Reports
	sel := client.MatchingLabels{report.ManagedByLabel: report.ManagedByValue}
	if namespace == "" {
		list := &v1alpha2.ClusterPolicyReportList{}
		if err := r.Client.List(ctx, list, sel, client.UnsafeDisableDeepCopy); err != nil {
			return out, fmt.Errorf("listing ClusterPolicyReports: %w", err)
		}
		out.ClusterPolicyReports = list.Items
		return out, nil
	}
	list := &v1alpha2.PolicyReportList{}
	if err := r.Client.List(ctx, list, sel, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return out, fmt.Errorf("listing PolicyReports in %s: %w", namespace, err)
	}
	out.PolicyReports = list.Items
	return out, nil
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
	r.count("create", len(c.PolicyReports.Create)+len(c.ClusterPolicyReports.Create))
	r.count("update", len(c.PolicyReports.Update)+len(c.ClusterPolicyReports.Update))
	r.count("delete", len(c.PolicyReports.Delete)+len(c.ClusterPolicyReports.Delete))
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
	remove := expecting(func(o client.Object) error { return client.IgnoreNotFound(r.Client.Delete(ctx, o)) }, true)
	var writes []func() error
	writes = appendWrites(writes, c.PolicyReports.Create, create)
	writes = appendWrites(writes, c.PolicyReports.Update, update)
	writes = appendWrites(writes, c.PolicyReports.Delete, remove)
	writes = appendWrites(writes, c.ClusterPolicyReports.Create, create)
	writes = appendWrites(writes, c.ClusterPolicyReports.Update, update)
	writes = appendWrites(writes, c.ClusterPolicyReports.Delete, remove)
	err := runBounded(ctx, writes, r.inFlight)
	// MaxHold counts from the end of the writes: a thousand chunks can take longer than that to write, and
	// the cache's lag begins when they are done.
	exp.since = r.Clock.Now()
	r.mu.Lock()
	st := r.state(namespace)
	st.expected = exp
	if err == nil {
		st.conflictSince = time.Time{}
	}
	r.mu.Unlock()
	if err != nil {
		return refused, fmt.Errorf("writing reports: %w", err)
	}
	return refused, nil
}

// appendWrites appends op on each of objs to writes.
func appendWrites[T any, PT interface {
	*T
	client.Object
}](writes []func() error, objs []T, op func(client.Object) error) []func() error {
	for i := range objs {
		o := PT(&objs[i])
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

// awaitingCache reports whether the cache has yet to show the namespace's last writes. An expectation is
// dropped once the cache shows it, or after MaxHold: a report changed by someone else meanwhile may never
// show the version written, and is then rebuilt from what the cache holds.
func (r *ReportReconciler) awaitingCache(namespace string, existing report.Reports) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(namespace)
	if st.expected == nil {
		return false
	}
	if r.Clock.Since(st.expected.since) < r.MaxHold && !cacheShows(existing, st.expected.reports) {
		return true
	}
	st.expected = nil
	return false
}

// cacheShows reports whether existing holds every report of want at least at the resourceVersion written,
// and none of those deleted ("").
func cacheShows(existing report.Reports, want map[string]string) bool {
	have := make(map[string]string, len(existing.PolicyReports)+len(existing.ClusterPolicyReports))
	for i := range existing.PolicyReports {
		have[existing.PolicyReports[i].Name] = existing.PolicyReports[i].ResourceVersion
	}
	for i := range existing.ClusterPolicyReports {
		have[existing.ClusterPolicyReports[i].Name] = existing.ClusterPolicyReports[i].ResourceVersion
	}
	for name, rv := range want {
		got, present := have[name]
		switch {
		case rv == "":
			if present {
				return false
			}
		case !present || !notOlder(got, rv):
			return false
		}
	}
	return true
}

// notOlder reports whether resourceVersion got is the same as or later than want. Resource versions are
// compared as numbers when both are (as etcd's are), otherwise only for equality.
func notOlder(got, want string) bool {
	g, errG := strconv.ParseUint(got, 10, 64)
	w, errW := strconv.ParseUint(want, 10, 64)
	if errG != nil || errW != nil {
		return got == want
	}
	return g >= w
}

// delay returns how long a write of namespace's reports must wait to keep writes Coalesce apart. It is
// called when the namespace's results change, which it records.
func (r *ReportReconciler) delay(namespace string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(namespace)
	if st.dirtySince.IsZero() {
		st.dirtySince = r.Clock.Now()
	}
	if st.lastWrite.IsZero() {
		return 0
	}
	return r.Coalesce - r.Clock.Since(st.lastWrite)
}

// hold reports whether the write of namespace's reports should wait for a rescan to finish.
func (r *ReportReconciler) hold(namespace string) bool {
	if r.Rescanning == nil || !r.Rescanning() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	since := r.state(namespace).dirtySince
	return !since.IsZero() && r.Clock.Since(since) < r.MaxHold
}

func (r *ReportReconciler) wrote(namespace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(namespace)
	st.lastWrite = r.Clock.Now()
	st.dirtySince = time.Time{}
}

// upToDate records that namespace's reports hold its results.
func (r *ReportReconciler) upToDate(namespace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(namespace)
	st.dirtySince = time.Time{}
	st.conflictSince = time.Time{}
	st.removed = nil // what the reports hold is current: the results of reports deleted before are gone
}

// reportDeleted keeps the result timestamps of a report of celaudit's that was deleted, until the namespace's
// reports are written again.
func (r *ReportReconciler) reportDeleted(o client.Object) {
	var deleted report.Reports
	switch o := o.(type) {
	case *v1alpha2.PolicyReport:
		deleted.PolicyReports = []v1alpha2.PolicyReport{*o}
	case *v1alpha2.ClusterPolicyReport:
		deleted.ClusterPolicyReports = []v1alpha2.ClusterPolicyReport{*o}
	default:
		return
	}
	timestamps := report.PreviousTimestamps(deleted)
	if len(timestamps) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(o.GetNamespace())
	st.removed = addMissing(st.removed, timestamps)
}

// previousTimestamps returns the timestamps of the results the namespace's reports hold, and of those its
// reports deleted since the last write held.
func (r *ReportReconciler) previousTimestamps(namespace string, existing report.Reports) map[string]metav1.Timestamp {
	previous := report.PreviousTimestamps(existing)
	r.mu.Lock()
	defer r.mu.Unlock()
	return addMissing(previous, r.state(namespace).removed)
}

// addMissing adds to dst the timestamps of src whose result IDs dst lacks, and returns dst (made when nil).
func addMissing(dst, src map[string]metav1.Timestamp) map[string]metav1.Timestamp {
	if dst == nil {
		dst = make(map[string]metav1.Timestamp, len(src))
	}
	for id, ts := range src {
		if _, ok := dst[id]; !ok {
			dst[id] = ts
		}
	}
	return dst
}

// published records that namespace's reports were written: the timestamps of reports deleted before are
// in them now, or belong to results that are gone.
func (r *ReportReconciler) published(namespace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state(namespace).removed = nil
}

// forget drops what is kept about namespace.
func (r *ReportReconciler) forget(namespace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.namespaces, namespace)
}

// state returns what is kept about namespace, created empty on first use. The caller holds r.mu.
func (r *ReportReconciler) state(namespace string) *namespaceState {
	st, ok := r.namespaces[namespace]
	if !ok {
		if r.namespaces == nil {
			r.namespaces = map[string]*namespaceState{}
		}
		st = &namespaceState{}
		r.namespaces[namespace] = st
	}
	return st
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
	if r.WritesInFlight <= 0 {
		r.WritesInFlight = 32
	}
	if r.inFlight == nil {
		r.inFlight = make(chan struct{}, r.WritesInFlight)
	}
}

// SetupWithManager registers the reconciler: it runs on result changes (from the notifier) and on changes
// to celaudit's own reports, so a report edited or deleted by hand is restored.
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
	b := ctrl.NewControllerManagedBy(mgr).
		Named("policyreport").
		Watches(&v1alpha2.PolicyReport{}, toNamespace, managed).
		Watches(&v1alpha2.ClusterPolicyReport{}, toNamespace, managed).
		WatchesRawSource(r.Notifier.Source(r.delay))
	for _, o := range opts {
		b = o(b)
	}
	return b.Complete(r)
}
