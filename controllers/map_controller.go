package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
)

// mapReconciler keeps one audit policy per MutatingAdmissionPolicy the API server would apply registered with
// the scanner. The policies are one chain: applied in order, reinvoked, each sees what the ones before it
// changed, so one policy's result on an object depends on the others. Whatever a reconcile is about (a
// policy, a binding, a CRD, discovery), it binds every policy again, compiling only the policies whose uid or
// generation changed (mutate.CacheKey), and replaces every policy of the chain in the scanner. Params and
// namespaces are read at evaluation time: a change of them rescans without binding.
//
// Its controller has one worker, so reconciles never overlap: the chain is built without a lock, which only
// guards the swap of the finished state.
type mapReconciler struct {
	Client     client.Client
	Registry   policyRegistry
	Discovery  *views.Discovery
	Params     *views.Params
	Namespaces vap.NamespaceGetter
	// Compiler compiles and binds the policies (its MAPDefaults classify their results).
	Compiler engine.Compiler
	Resync   time.Duration
	Startup  *startupGate
	Clock    clock.PassiveClock
	// Warnings records the Warning Events of policies that do not compile.
	Warnings *warnings

	mu    sync.Mutex
	state *mapState // replaced whole, never modified
	// rebind is signalled when discovery changed: every policy is bound again.
	rebind chan struct{}
	// discovered is closed once discovery was first read: a chain bound before would cover no resource.
	discovered chan struct{}
}

// mapState is what was registered for the chain. It is replaced whole, never modified, so readers may use
// it after the lock is released.
type mapState struct {
	// signature identifies the inputs of the binding besides discovery: the policies' compile keys, the
	// bindings and the CRDs.
	signature string
	resolver  *vap.StaticResolver
	// compiled holds each policy's compilation by mutate.CacheKey.
	compiled map[string]*mutate.Compiled
	// names are those of the policies, bound or not.
	names    []string
	policies map[audit.PolicyKey]mapPolicy
}

// mapPolicy is one registered policy of the chain.
type mapPolicy struct {
	policy    audit.Policy
	paramKind *schema.GroupVersionKind
	resync    time.Duration
	scanned   time.Time
}

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingadmissionpolicies;mutatingadmissionpolicybindings,verbs=get;list;watch

// Reconcile binds the whole chain again when any of its inputs changed, and otherwise rescans the policies
// whose periodic rescan is due. The request names the policy that changed, or one of them.
func (r *mapReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	select {
	case <-r.discovered:
	case <-ctx.Done():
		return ctrl.Result{}, ctx.Err()
	}
	defer r.Startup.Reconciled(audit.MAPKey(req.Name))
	in, err := r.gather(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	st := r.current()
	resolver := r.Discovery.Snapshot()
	signature := in.signature()
	if st != nil && st.signature == signature && st.resolver == resolver {
		return r.resync(st, now), nil
	}
	next, err := r.bind(ctx, in, st, signature, resolver, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.swap(ctx, st, next)
	return requeueIn(minResync(next), 0), nil
}

// mapInputs are what the chain is bound from, as the cache holds them.
type mapInputs struct {
	policies []*admissionregistrationv1.MutatingAdmissionPolicy
	bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	crds     []*apiextensionsv1.CustomResourceDefinition
}

// gather lists the policies (those being deleted left out), their bindings and the CRDs.
func (r *mapReconciler) gather(ctx context.Context) (mapInputs, error) {
	policies := &admissionregistrationv1.MutatingAdmissionPolicyList{}
	if err := r.Client.List(ctx, policies); err != nil {
		return mapInputs{}, fmt.Errorf("listing MutatingAdmissionPolicies: %w", err)
	}
	bindings := &admissionregistrationv1.MutatingAdmissionPolicyBindingList{}
	if err := r.Client.List(ctx, bindings); err != nil {
		return mapInputs{}, fmt.Errorf("listing MutatingAdmissionPolicyBindings: %w", err)
	}
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := r.Client.List(ctx, crds); err != nil {
		return mapInputs{}, fmt.Errorf("listing CustomResourceDefinitions: %w", err)
	}
	var in mapInputs
	for i := range policies.Items {
		if policies.Items[i].DeletionTimestamp.IsZero() {
			in.policies = append(in.policies, &policies.Items[i])
		}
	}
	for i := range bindings.Items {
		in.bindings = append(in.bindings, &bindings.Items[i])
	}
	for i := range crds.Items {
		in.crds = append(in.crds, &crds.Items[i])
	}
	slices.SortFunc(in.policies, byName)
	slices.SortFunc(in.bindings, byName)
	slices.SortFunc(in.crds, byName)
	return in, nil
}

func byName[T metav1.Object](a, b T) int { return strings.Compare(a.GetName(), b.GetName()) }

// signature identifies what binding the chain depends on besides discovery. A policy's annotations (category,
// severity, resync) are part of it: they are read when binding.
func (in mapInputs) signature() string {
	var b strings.Builder
	for _, p := range in.policies {
		fmt.Fprintf(&b, "p:%s/%s;", mutate.CacheKey(p), annotationsSignature(p.Annotations))
	}
	for _, x := range in.bindings {
		fmt.Fprintf(&b, "b:%s/%s/%d;", x.Name, x.UID, x.Generation)
	}
	for _, x := range in.crds {
		fmt.Fprintf(&b, "c:%s/%s/%d;", x.Name, x.UID, x.Generation)
	}
	return b.String()
}

// annotationsSignature is celaudit's annotations of a policy, in a stable order.
func annotationsSignature(annotations map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		if strings.HasPrefix(k, "celaudit.io/") {
			parts = append(parts, k+"="+annotations[k])
		}
	}
	return strings.Join(parts, ",")
}

// bind compiles the policies that changed since st, binds them all with their bindings, the CRDs and
// resolver, and has the params each one reads tracked.
func (r *mapReconciler) bind(ctx context.Context, in mapInputs, st *mapState, signature string, resolver *vap.StaticResolver,
	now time.Time) (*mapState, error) {
	next := &mapState{signature: signature, resolver: resolver, compiled: map[string]*mutate.Compiled{}, policies: map[audit.PolicyKey]mapPolicy{}}
	compiled := make([]*mutate.Compiled, 0, len(in.policies))
	byName := map[string]*admissionregistrationv1.MutatingAdmissionPolicy{}
	for _, p := range in.policies {
		key := mutate.CacheKey(p)
		c := next.compiled[key]
		if st != nil && c == nil {
			c = st.compiled[key]
		}
		if c == nil {
			ctrl.LoggerFrom(ctx).V(1).Info("Compiling policy", "policy", audit.MAPKey(p.Name).String(), "generation", p.Generation)
			c = r.Compiler.MAP(p)
			r.Warnings.compileFailed(p, kindMAP, c.Problems())
		}
		next.compiled[key] = c
		next.names = append(next.names, p.Name)
		compiled = append(compiled, c)
		byName[p.Name] = p
	}
	views := engine.Views{Resources: resolver, Namespaces: r.Namespaces, Params: r.Params, CRDs: in.crds}
	for _, p := range r.Compiler.BindMAPs(compiled, in.bindings, views) {
		key := p.Key()
		policy := byName[key.Name]
		gvk := mapParamKind(policy)
		if err := r.Params.Track(ctx, key, gvk, mapParamRefs(key.Name, in.bindings)); err != nil {
			return nil, err
		}
		next.policies[key] = mapPolicy{
			policy:    p,
			paramKind: gvk,
			resync:    audit.ParseAnnotations(policy.Annotations).ResyncOr(r.Resync),
			scanned:   now,
		}
	}
	return next, nil
}

// swap registers next in place of st: every policy of the chain is set again (its results may change with
// any other's), unless only discovery changed in a way that changes no result (the params of every policy
// resolve as before): then only newly covered resources are read. Policies gone are removed, and their params
// no longer read.
func (r *mapReconciler) swap(ctx context.Context, st, next *mapState) {
	onlyDiscovery := st != nil && st.signature == next.signature && sameParamKinds(st, next)
	for key, p := range next.policies {
		if old, ok := st.lookup(key); ok && onlyDiscovery {
			p.scanned = old.scanned
			next.policies[key] = p
		}
	}
	r.mu.Lock()
	r.state = next
	r.mu.Unlock()
	for _, key := range slices.SortedFunc(maps.Keys(next.policies), audit.PolicyKey.Compare) {
		if _, had := st.lookup(key); had && onlyDiscovery {
			r.Registry.ReplacePolicy(next.policies[key].policy)
		} else {
			r.Registry.SetPolicy(next.policies[key].policy)
		}
	}
	if st == nil {
		return
	}
	for _, name := range st.names {
		if !slices.Contains(next.names, name) {
			r.Warnings.forget(kindMAP, name)
		}
	}
	for key := range st.policies {
		if _, ok := next.policies[key]; !ok {
			r.Registry.RemovePolicy(key)
			if err := r.Params.Track(ctx, key, nil, nil); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Releasing the params of a removed policy failed", "policy", key.String())
			}
		}
	}
}

// sameParamKinds reports whether the param kinds of next's policies are served in next as in st (a policy
// whose params are not served is an error on every object).
func sameParamKinds(st, next *mapState) bool {
	for key, p := range next.policies {
		if p.paramKind == nil {
			continue
		}
		old, ok := st.lookup(key)
		if !ok || old.paramKind == nil || *old.paramKind != *p.paramKind {
			return false
		}
		_, errOld := st.resolver.ResourceForKind(*p.paramKind)
		_, errNew := next.resolver.ResourceForKind(*p.paramKind)
		if (errOld == nil) != (errNew == nil) {
			return false
		}
	}
	return true
}

// lookup returns the registered policy of key; st may be nil.
func (st *mapState) lookup(key audit.PolicyKey) (mapPolicy, bool) {
	if st == nil {
		return mapPolicy{}, false
	}
	p, ok := st.policies[key]
	return p, ok
}

// resync rescans the policies of the unchanged chain st whose periodic rescan is due, and returns the result
// that brings the reconcile back for the next one.
func (r *mapReconciler) resync(st *mapState, now time.Time) ctrl.Result {
	var due []audit.PolicyKey
	for key, p := range st.policies {
		if p.resync > 0 && now.Sub(p.scanned) >= p.resync {
			due = append(due, key)
		}
	}
	if len(due) == 0 {
		return requeueIn(minResyncAt(st, now), 0)
	}
	next := &mapState{signature: st.signature, resolver: st.resolver, compiled: st.compiled, names: st.names, policies: maps.Clone(st.policies)}
	for _, key := range due {
		p := next.policies[key]
		p.scanned = now
		next.policies[key] = p
	}
	r.mu.Lock()
	r.state = next
	r.mu.Unlock()
	slices.SortFunc(due, audit.PolicyKey.Compare)
	for _, key := range due {
		r.Registry.Rescan(key, "")
	}
	return requeueIn(minResyncAt(next, now), 0)
}

// minResync is the shortest resync interval of a freshly registered chain (0: none).
func minResync(st *mapState) time.Duration {
	var out time.Duration
	for _, p := range st.policies {
		if p.resync > 0 && (out == 0 || p.resync < out) {
			out = p.resync
		}
	}
	return out
}

// minResyncAt is the time until the next periodic rescan of a policy of st is due (0: none).
func minResyncAt(st *mapState, now time.Time) time.Duration {
	var out time.Duration
	for _, p := range st.policies {
		if p.resync <= 0 {
			continue
		}
		left := max(p.resync-now.Sub(p.scanned), time.Second)
		if out == 0 || left < out {
			out = left
		}
	}
	return out
}

func (r *mapReconciler) current() *mapState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// mapParamKind returns the kind of policy's params, nil without params or when it does not parse (the
// policy is then not applied, see mutate.NewSet).
func mapParamKind(policy *admissionregistrationv1.MutatingAdmissionPolicy) *schema.GroupVersionKind {
	pk := policy.Spec.ParamKind
	if pk == nil {
		return nil
	}
	gv, err := schema.ParseGroupVersion(pk.APIVersion)
	if err != nil {
		return nil
	}
	gvk := gv.WithKind(pk.Kind)
	return &gvk
}

// mapParamRefs returns the paramRefs of the bindings of policy.
func mapParamRefs(policy string, bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding) []*admissionregistrationv1.ParamRef {
	var out []*admissionregistrationv1.ParamRef
	for _, b := range bindings {
		if b.Spec.PolicyName == policy && b.Spec.ParamRef != nil {
			out = append(out, b.Spec.ParamRef)
		}
	}
	return out
}

// paramsChanged rescans the whole chain when a param object of a kind one of its policies reads changed (the
// Params source reports only the objects bindings reference): the policy reading it may change the object
// differently, and so may every policy after it.
func (r *mapReconciler) paramsChanged(gvk schema.GroupVersionKind, _ ...metav1.Object) {
	st := r.current()
	if st == nil {
		return
	}
	reads := false
	for _, p := range st.policies {
		if p.paramKind != nil && *p.paramKind == gvk {
			reads = true
		}
	}
	if !reads {
		return
	}
	for _, key := range slices.SortedFunc(maps.Keys(st.policies), audit.PolicyKey.Compare) {
		r.Registry.Rescan(key, "")
	}
}

// namespaceDependents returns the keys of every registered policy: whether a policy reads its namespace (a
// namespaceSelector, the namespaceObject variable) is not known from its compilation, and through the chain a
// policy's result depends on what the others read.
func (r *mapReconciler) namespaceDependents() []audit.PolicyKey {
	st := r.current()
	if st == nil {
		return nil
	}
	return slices.SortedFunc(maps.Keys(st.policies), audit.PolicyKey.Compare)
}

// discoveryChanged binds the chain again against the new discovery snapshot.
func (r *mapReconciler) discoveryChanged() {
	select {
	case r.rebind <- struct{}{}:
	default:
	}
}

// listAtStartup reads discovery, which binding needs, then tells the start-up gate which policies the synced
// cache holds.
func (r *mapReconciler) listAtStartup(ctx context.Context) error {
	if err := r.Discovery.Refresh(ctx); err != nil {
		return err
	}
	close(r.discovered)
	return r.Startup.ListFrom(ctx, r.Client, audit.SourceMAP, &admissionregistrationv1.MutatingAdmissionPolicyList{})
}

// SetupWithManager registers the reconciler and the start-up listing with mgr. Run it with one worker (see
// setupMAPs): every reconcile binds the whole chain.
func (r *mapReconciler) SetupWithManager(mgr ctrl.Manager, opts ...func(*ctrl.Builder) *ctrl.Builder) error {
	if r.Client == nil || r.Registry == nil || r.Discovery == nil || r.Params == nil || r.Namespaces == nil || r.Startup == nil || r.Warnings == nil {
		return fmt.Errorf("mapReconciler needs Client, Registry, Discovery, Params, Namespaces, Startup and Warnings")
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.rebind = make(chan struct{}, 1)
	r.discovered = make(chan struct{})
	r.Discovery.OnChange(r.discoveryChanged)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return ctx.Err()
		}
		return r.listAtStartup(ctx)
	})); err != nil {
		return fmt.Errorf("adding MutatingAdmissionPolicy start-up listing: %w", err)
	}
	toPolicy := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		b := o.(*admissionregistrationv1.MutatingAdmissionPolicyBinding)
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: b.Spec.PolicyName}}}
	})
	toAll := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		return r.allPolicies(ctx)
	})
	b := ctrl.NewControllerManagedBy(mgr).
		For(&admissionregistrationv1.MutatingAdmissionPolicy{}).
		Named("mutatingadmissionpolicy").
		Watches(&admissionregistrationv1.MutatingAdmissionPolicyBinding{}, toPolicy).
		// A CRD's schema defaults and merges the policies' changes to its objects.
		Watches(&apiextensionsv1.CustomResourceDefinition{}, toAll, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			go r.enqueueAllOnRebind(ctx, q)
			return nil
		}))
	for _, o := range opts {
		b = o(b)
	}
	return b.Complete(r)
}

// allPolicies returns a request per policy.
func (r *mapReconciler) allPolicies(ctx context.Context) []reconcile.Request {
	policies := &admissionregistrationv1.MutatingAdmissionPolicyList{}
	if err := r.Client.List(ctx, policies); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing MutatingAdmissionPolicies to bind again failed")
		return nil
	}
	out := make([]reconcile.Request, 0, len(policies.Items))
	for _, p := range policies.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
	}
	return out
}

func (r *mapReconciler) enqueueAllOnRebind(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.rebind:
		}
		for _, req := range r.allPolicies(ctx) {
			q.Add(req)
		}
	}
}

// mutatingPoliciesAudited reports whether MutatingAdmissionPolicies are audited: --audit-mutating-policies
// is on and the API server serves them. An older API server does not: celaudit starts without them and
// says so once.
func mutatingPoliciesAudited(mgr ctrl.Manager, o Options, log logr.Logger) (bool, error) {
	if !o.AuditMutatingPolicies {
		return false, nil
	}
	ok, err := served(mgr.GetRESTMapper(), admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicy"))
	if err != nil || ok {
		return ok, err
	}
	log.Info("The API server does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicies: mutation drift is not audited")
	return false, nil
}

// setupMAPs sets up the reconciler that binds the chain of MutatingAdmissionPolicies, with the params it
// reads, when they are audited; it returns nil otherwise. Its params are watched apart from those of the
// ValidatingAdmissionPolicies: a change of them rescans the chain.
func setupMAPs(cfg *rest.Config, mgr ctrl.Manager, o Options, a *auditParts) (*mapReconciler, error) {
	if !a.mutatingPolicies {
		return nil, nil
	}
	namespaces, err := newCachedNamespaces(mgr.GetCache())
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	r := &mapReconciler{
		Client:     mgr.GetClient(),
		Registry:   a.scan,
		Discovery:  a.discovery,
		Namespaces: namespaces,
		Resync:     o.ResyncPeriod,
		Startup:    a.startup,
		Warnings:   a.warnings,
	}
	disc := a.discovery
	r.Params = views.NewParams(dyn, func() vap.ResourceResolver { return disc.Snapshot() }, r.paramsChanged, o.withheldParams())
	r.Params.ForbiddenHint = forbiddenHint(0)
	if err := mgr.Add(r.Params); err != nil {
		return nil, fmt.Errorf("adding MutatingAdmissionPolicy param source: %w", err)
	}
	// One worker: every reconcile binds the whole chain, so two at once would race to register it.
	if err := r.SetupWithManager(mgr, controllerOptions(o, 1)); err != nil {
		return nil, fmt.Errorf("setting up MutatingAdmissionPolicy controller: %w", err)
	}
	return r, nil
}
