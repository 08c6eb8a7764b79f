package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// retiredReports removes celaudit's reports of a report API it no longer writes. When --report-api switches
// from wgpolicy to openreports (or back, or from both to one), the reports of the API left behind would stay
// as they were, and a reader of both APIs, such as Policy Reporter, would count every result twice.
//
// They are removed once the reports of the API written are complete, never before, so that a reader never
// finds neither: once every namespace that has results or holds a report of the retired API has had its
// reports written, or found current, by the report reconciler since the first audit. Only the reports
// carrying celaudit's label are removed, each with a precondition on its UID: a report that someone else
// created since under the same name is left alone.
type retiredReports struct {
	// Reader reads the retired API's reports from the API server: the cache holds only those of the API
	// written.
	Reader client.Reader
	// Client deletes them.
	Client client.Writer
	// Retired is the API no longer written.
	Retired reportAPI
	// Ready reports whether the first audit is done.
	Ready func() bool
	// Namespaces returns the namespaces ("" for the cluster) with results: those the API written publishes
	// reports in.
	Namespaces func() []string
	// Enqueue has the report reconciler look at namespace: one that holds only reports of the retired API has
	// nothing that would make it do so.
	Enqueue func(namespace string)
	// PageSize is the limit of each LIST of the retired API's reports.
	PageSize int64
	// Owns, when set (a sharded audit), reports whether this member writes the reports of namespace: only
	// those are removed, and waited for.
	Owns func(namespace string) bool

	mu sync.Mutex
	// current are the namespaces whose reports the report reconciler found current since it started; nil
	// once the retired reports are removed.
	current sets.Set[string]
	// waiting are the namespaces the removal waits for; empty: it waits for none.
	waiting sets.Set[string]
	// done is set once no report of the retired API is left.
	done bool
	// signal asks for a Reconcile; it holds one token, so none is lost before the controller starts.
	signal chan struct{}
}

// newRetiredReports returns the remover of retired's reports, with a Reconcile pending.
func newRetiredReports(retired reportAPI) *retiredReports {
	r := &retiredReports{Retired: retired, current: sets.New[string](), signal: make(chan struct{}, 1)}
	r.wake()
	return r
}

// Reconcile removes the retired API's reports once the reports written are complete. Every request is the
// same: look again.
func (r *retiredReports) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	if r.finished() || !r.Ready() {
		return ctrl.Result{}, nil // Notifier.Recheck wakes it when the first audit completes
	}
	retired, err := r.list(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if r.Owns != nil {
		retired = slices.DeleteFunc(retired, func(m metav1.PartialObjectMetadata) bool { return !r.Owns(m.Namespace) })
	}
	if len(retired) == 0 {
		r.finish()
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("api", r.Retired.name())
	want := sets.New(r.Namespaces()...)
	for i := range retired {
		want.Insert(retired[i].Namespace)
	}
	if r.Owns != nil {
		want = want.Difference(sets.New(slices.DeleteFunc(want.UnsortedList(), r.Owns)...))
	}
	if waiting := r.waitFor(want); len(waiting) > 0 {
		log.V(1).Info("Reports of the API no longer written wait for the new reports", "reports", len(retired), "namespaces", len(waiting))
		for _, ns := range waiting {
			r.Enqueue(ns)
		}
		return ctrl.Result{}, nil // reportsCurrent wakes it when the last of them is current
	}
	removed, err := r.remove(ctx, retired)
	if removed > 0 {
		log.Info("Removed celaudit's reports of an API it no longer writes", "reports", removed)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	r.finish()
	return ctrl.Result{}, nil
}

// list returns celaudit's reports of the retired API, namespaced and cluster-scoped, their metadata only.
// A kind the API server does not serve (its CRD removed) has none.
func (r *retiredReports) list(ctx context.Context) ([]metav1.PartialObjectMetadata, error) {
	namespaced, cluster := r.Retired.kinds()
	var out []metav1.PartialObjectMetadata
	for _, gvk := range []schema.GroupVersionKind{namespaced, cluster} {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		for {
			err := r.Reader.List(ctx, l, managedSelector(), client.Limit(r.PageSize), client.Continue(l.Continue))
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("listing celaudit's %ss: %w", gvk.Kind, err)
			}
			for _, item := range l.Items {
				item.SetGroupVersionKind(gvk)
				out = append(out, item)
			}
			if l.Continue == "" {
				break
			}
		}
	}
	return out, nil
}

// remove deletes reports, each on the condition that it is still the object listed, and returns how many it
// deleted. A report gone meanwhile, or replaced by another under its name, is not an error.
func (r *retiredReports) remove(ctx context.Context, reports []metav1.PartialObjectMetadata) (int, error) {
	var (
		removed int
		errs    []error
	)
	for i := range reports {
		uid := reports[i].UID
		err := r.Client.Delete(ctx, &reports[i], client.Preconditions{UID: &uid})
		switch {
		case err == nil:
			removed++
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		default:
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", reports[i].Kind, client.ObjectKeyFromObject(&reports[i]), err))
		}
	}
	return removed, errors.Join(errs...)
}

// waitFor records that the removal waits for the namespaces of want not yet current, and returns them.
func (r *retiredReports) waitFor(want sets.Set[string]) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiting = want.Difference(r.current)
	return r.waiting.UnsortedList()
}

// reportsCurrent records that the reports of namespace hold its results: written, found current, or left to
// go with the namespace. The report reconciler calls it.
func (r *retiredReports) reportsCurrent(namespace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.current.Insert(namespace)
	if r.waiting.Has(namespace) {
		r.waiting.Delete(namespace)
		if r.waiting.Len() == 0 {
			r.wake()
		}
	}
}

func (r *retiredReports) finished() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

// finish records that no report of the retired API is left; what was kept to decide when to remove them is
// dropped.
func (r *retiredReports) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done, r.current, r.waiting = true, nil, nil
}

// wake asks for a Reconcile, without blocking.
func (r *retiredReports) wake() {
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// SetupWithManager registers the remover: it runs when woken, at the first audit's end (notifier's Recheck)
// and when the namespaces it waits for are current. As a controller, it runs on the leader only.
func (r *retiredReports) SetupWithManager(mgr ctrl.Manager, notifier *Notifier, opts ...func(*ctrl.Builder) *ctrl.Builder) error {
	if r.Reader == nil || r.Client == nil || r.Retired == nil || r.Ready == nil || r.Namespaces == nil || r.Enqueue == nil || notifier == nil {
		return fmt.Errorf("retiredReports needs Reader, Client, Retired, Ready, Namespaces, Enqueue and a notifier")
	}
	if r.PageSize <= 0 {
		r.PageSize = 500
	}
	notifier.OnRecheck(r.wake)
	woken := source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-r.signal:
					q.Add(reconcile.Request{NamespacedName: client.ObjectKey{Name: reportKeyName}}) // the only one
				}
			}
		}()
		return nil
	})
	b := ctrl.NewControllerManagedBy(mgr).Named("retired-" + r.Retired.name()).WatchesRawSource(woken)
	for _, o := range opts {
		b = o(b)
	}
	return b.Complete(r)
}
