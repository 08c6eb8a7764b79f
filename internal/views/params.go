package views

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/vap"
)

// paramSyncTimeout bounds how long binding a policy waits for a new param informer to fill.
const paramSyncTimeout = 30 * time.Second

// paramQuery is what one binding's paramRef reads: objects of a kind by name or by label selector, in one
// namespace or in all of them. Each query has its own informer, filtered by the API server, so celaudit
// holds the param objects bindings read and not every object of the kind (every ConfigMap, say).
type paramQuery struct {
	gvk       schema.GroupVersionKind
	namespace string // "" for all namespaces, or a cluster-scoped kind
	name      string // field selector metadata.name, or ""
	selector  string // label selector, or ""
}

type paramInformer struct {
	informer toolscache.SharedIndexInformer
	stop     context.CancelFunc
	users    map[audit.PolicyKey]bool // policies reading through this query

	// forbidden is why the informer cannot fill, while its LIST is forbidden: set by its watch error handler
	// until it syncs. denied is closed at the first such error, so that Track stops waiting for it.
	forbidden  atomic.Pointer[audit.ForbiddenRead]
	denied     chan struct{}
	deniedOnce sync.Once
}

// Params serves ValidatingAdmissionPolicy param objects from informers on exactly what bindings reference,
// and reports changes to them so that the policies reading them are audited again.
type Params struct {
	// ForbiddenHint, when set, says in the error of params celaudit may not read how to grant read access to
	// them (see scan.Options.ForbiddenHint). Set it before Start.
	ForbiddenHint string

	client   dynamic.Interface
	resolver func() vap.ResourceResolver
	onChange func(gvk schema.GroupVersionKind, objs ...metav1.Object)
	// withheld holds the param kinds never read, and why; never modified.
	withheld map[schema.GroupVersionKind]error

	started   chan struct{} // closed once Start has recorded ctx
	mu        sync.RWMutex
	ctx       context.Context
	informers map[paramQuery]*paramInformer
	byPolicy  map[audit.PolicyKey][]paramQuery
}

var (
	_ vap.ParamSource     = &Params{}
	_ vap.ParamWithholder = &Params{}
	_ vap.ParamFailer     = &Params{}
)

// NewParams returns a param source reading through client; resolver maps param kinds to resources;
// onChange is called after a param object is added, changed (with its old and new versions) or deleted, and
// with no object when every policy reading params of the kind is to be audited again (they can be read now).
// Params of the kinds in withheld are never read, not even listed: the policies reading them get the error
// held for their kind instead (see vap.ParamWithholder).
func NewParams(client dynamic.Interface, resolver func() vap.ResourceResolver, onChange func(gvk schema.GroupVersionKind, objs ...metav1.Object),
	withheld map[schema.GroupVersionKind]error) *Params {
	return &Params{
		client:    client,
		resolver:  resolver,
		onChange:  onChange,
		withheld:  withheld,
		started:   make(chan struct{}),
		informers: map[paramQuery]*paramInformer{},
		byPolicy:  map[audit.PolicyKey][]paramQuery{},
	}
}

// Start records the context informers run in and stops them all when it ends.
func (p *Params) Start(ctx context.Context) error {
	p.mu.Lock()
	p.ctx = ctx
	p.mu.Unlock()
	close(p.started)
	<-ctx.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	for q, inf := range p.informers {
		inf.stop()
		delete(p.informers, q)
	}
	return nil
}

// Track makes the param objects that policy's bindings read (through paramRefs to objects of gvk) available
// and watched, and stops watching what no policy reads any more. gvk nil means the policy reads no params.
// It returns once new informers have synced, so the policy can be evaluated at once.
func (p *Params) Track(ctx context.Context, policy audit.PolicyKey, gvk *schema.GroupVersionKind, refs []*admissionregistrationv1.ParamRef) error {
	select {
	case <-p.started:
	case <-ctx.Done():
		return ctx.Err()
	}
	var want []paramQuery
	if gvk != nil && p.withheld[*gvk] == nil {
		res, err := p.resolver().ResourceForKind(*gvk)
		if err != nil {
			want = nil // not installed: the policy reports it; discovery binds it again once it is
		} else {
			for _, ref := range refs {
				if q, ok := queryFor(*gvk, res.Namespaced, ref); ok {
					want = append(want, q)
				}
			}
		}
	}
	p.mu.Lock()
	old := p.byPolicy[policy]
	p.byPolicy[policy] = want
	var started []*paramInformer
	for _, q := range want {
		inf := p.informers[q]
		if inf == nil {
			var err error
			if inf, err = p.startLocked(q); err != nil {
				p.mu.Unlock()
				return err
			}
			p.informers[q] = inf
			started = append(started, inf)
		}
		inf.users[policy] = true
	}
	for _, q := range old {
		if inf := p.informers[q]; inf != nil && !containsQuery(want, q) {
			delete(inf.users, policy)
			if len(inf.users) == 0 {
				inf.stop()
				delete(p.informers, q)
			}
		}
	}
	if len(want) == 0 {
		delete(p.byPolicy, policy)
	}
	p.mu.Unlock()

	syncCtx, cancel := context.WithTimeout(ctx, paramSyncTimeout)
	defer cancel()
	for _, inf := range started {
		if !waitSyncedOrDenied(syncCtx, inf) {
			return fmt.Errorf("param informer for %s did not sync", policy)
		}
	}
	return nil
}

// waitSyncedOrDenied waits until inf has synced or its LIST is forbidden, and reports whether either
// happened before ctx ended. A forbidden informer keeps retrying with backoff; its readers get the error
// meanwhile (see ParamsFailing), and its policies are rescanned once it syncs.
func waitSyncedOrDenied(ctx context.Context, inf *paramInformer) bool {
	stop := make(chan struct{})
	defer close(stop)
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-inf.denied:
			cancel()
		case <-stop:
		}
	}()
	if toolscache.WaitForCacheSync(waitCtx.Done(), inf.informer.HasSynced) {
		return true
	}
	select {
	case <-inf.denied:
		return true
	default:
		return false
	}
}

// queryFor returns the query that serves ref, as the apiserver resolves paramRefs: by name or selector, in
// ref's namespace, or in the audited object's namespace (any namespace here) when ref names none.
func queryFor(gvk schema.GroupVersionKind, namespaced bool, ref *admissionregistrationv1.ParamRef) (paramQuery, bool) {
	if ref == nil {
		return paramQuery{}, false
	}
	q := paramQuery{gvk: gvk}
	if namespaced {
		q.namespace = ref.Namespace
	}
	switch {
	case ref.Name != "":
		q.name = ref.Name
	case ref.Selector != nil:
		sel, err := metav1.LabelSelectorAsSelector(ref.Selector)
		if err != nil {
			return paramQuery{}, false // the binding fails to configure; nothing to read
		}
		q.selector = sel.String()
	default:
		return paramQuery{}, false
	}
	return q, true
}

func containsQuery(qs []paramQuery, q paramQuery) bool {
	for _, x := range qs {
		if x == q {
			return true
		}
	}
	return false
}

func (p *Params) startLocked(q paramQuery) (*paramInformer, error) {
	if p.ctx == nil {
		return nil, fmt.Errorf("param source is not started")
	}
	res, err := p.resolver().ResourceForKind(q.gvk)
	if err != nil {
		return nil, fmt.Errorf("resolving param kind %s: %w", q.gvk, err)
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(p.client, res.Resource, q.namespace, 0, toolscache.Indexers{},
		func(o *metav1.ListOptions) {
			if q.name != "" {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", q.name).String()
			}
			o.LabelSelector = q.selector
		}).Informer()
	if err := inf.SetTransform(stripManagedFields); err != nil {
		return nil, fmt.Errorf("watching param kind %s: %w", q.gvk, err)
	}
	changed := func(objs ...any) {
		metas := make([]metav1.Object, 0, len(objs))
		for _, o := range objs {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if m, ok := o.(metav1.Object); ok {
				metas = append(metas, m)
			}
		}
		p.onChange(q.gvk, metas...)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(o any, initial bool) {
			if !initial {
				changed(o)
			}
		},
		UpdateFunc: func(o, n any) { changed(o, n) },
		DeleteFunc: func(o any) { changed(o) },
	}); err != nil {
		return nil, fmt.Errorf("watching param kind %s: %w", q.gvk, err)
	}
	ctx, cancel := context.WithCancel(p.ctx)
	pi := &paramInformer{informer: inf, stop: cancel, users: map[audit.PolicyKey]bool{}, denied: make(chan struct{})}
	if err := inf.SetWatchErrorHandlerWithContext(p.watchErrors(q.gvk, res.Resource.GroupResource(), pi)); err != nil {
		cancel()
		return nil, fmt.Errorf("watching param kind %s: %w", q.gvk, err)
	}
	go inf.RunWithContext(ctx)
	return pi, nil
}

// watchErrors handles the LIST and WATCH errors of pi, an informer on params of gvk (resource gr): until it
// has synced, a forbidden one is recorded as pi's error for its readers, and pi's policies are rescanned once
// it syncs. Other errors, and errors after it synced (its objects are still served), are logged as usual.
func (p *Params) watchErrors(gvk schema.GroupVersionKind, gr schema.GroupResource, pi *paramInformer) toolscache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, r *toolscache.Reflector, err error) {
		if !apierrors.IsForbidden(err) || pi.informer.HasSynced() {
			toolscache.DefaultWatchErrorHandler(ctx, r, err)
			return
		}
		var status *apierrors.StatusError // the API server's answer, without the reflector's wrapping
		if errors.As(err, &status) {
			err = status
		}
		pi.forbidden.Store(&audit.ForbiddenRead{Resource: gr, Role: "the resource of the paramKind", Grant: p.ForbiddenHint, Err: err})
		pi.deniedOnce.Do(func() {
			close(pi.denied)
			go p.rescanWhenSynced(ctx, gvk, pi)
		})
	}
}

// rescanWhenSynced waits until the informer of a forbidden LIST syncs (celaudit was granted read access),
// then clears its error and has the policies reading params of gvk audited again: the objects of its first
// LIST are no change of a param, so nothing else would.
func (p *Params) rescanWhenSynced(ctx context.Context, gvk schema.GroupVersionKind, pi *paramInformer) {
	if !toolscache.WaitForCacheSync(ctx.Done(), pi.informer.HasSynced) {
		return
	}
	pi.forbidden.Store(nil)
	p.onChange(gvk)
}

func stripManagedFields(o any) (any, error) {
	if m, ok := o.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return o, nil
}

// ParamsWithheld implements vap.ParamWithholder.
func (p *Params) ParamsWithheld(gvk schema.GroupVersionKind) error { return p.withheld[gvk] }

// ParamsFailing implements vap.ParamFailer: the error of a forbidden informer on params of gvk that could
// serve namespace ("" for a cluster-scoped kind).
func (p *Params) ParamsFailing(gvk schema.GroupVersionKind, namespace string) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for q, inf := range p.informers {
		if q.gvk != gvk || (q.namespace != "" && q.namespace != namespace) {
			continue
		}
		if err := inf.forbidden.Load(); err != nil {
			return err
		}
	}
	return nil
}

// Get implements vap.ParamSource.
func (p *Params) Get(gvk schema.GroupVersionKind, namespace, name string) (runtime.Object, error) {
	if err := p.withheld[gvk]; err != nil {
		return nil, err
	}
	if err := p.ParamsFailing(gvk, namespace); err != nil {
		return nil, err
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for q, inf := range p.informers {
		if q.gvk != gvk {
			continue
		}
		if o, ok, _ := inf.informer.GetStore().GetByKey(key); ok {
			return o.(*unstructured.Unstructured), nil
		}
	}
	return nil, paramNotFound(gvk, name)
}

// List implements vap.ParamSource.
func (p *Params) List(gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]runtime.Object, error) {
	if err := p.withheld[gvk]; err != nil {
		return nil, err
	}
	if err := p.ParamsFailing(gvk, namespace); err != nil {
		return nil, err
	}
	if selector == nil {
		selector = labels.Everything()
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	seen := map[string]bool{}
	var out []runtime.Object
	for q, inf := range p.informers {
		if q.gvk != gvk {
			continue
		}
		for _, o := range inf.informer.GetStore().List() {
			u := o.(*unstructured.Unstructured)
			key := objectKey(u.GetNamespace(), u.GetName())
			if seen[key] || (namespace != "" && u.GetNamespace() != namespace) || !selector.Matches(labels.Set(u.GetLabels())) {
				continue
			}
			seen[key] = true
			out = append(out, u)
		}
	}
	// Informers are visited in map order.
	sortObjects(out)
	return out, nil
}
