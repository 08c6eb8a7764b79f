package controllers

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/auditpolicy"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
)

// bindingPolicyField indexes bindings by the policy they bind.
const bindingPolicyField = "spec.policyName"

// controllingAuditPolicyField indexes ValidatingAdmissionPolicies by the AuditPolicy their controller
// ownerReference names, so that an AuditPolicy appearing or disappearing reconciles the policies it may own.
const controllingAuditPolicyField = "auditPolicyController"

// vapReconciler keeps one audit policy per ValidatingAdmissionPolicy registered with the scanner: the
// policy compiled once per uid and generation, bound to its bindings and to the served resources. A binding
// or discovery change binds again without recompiling; a param or namespace change rescans without binding.
//
// Reconciles of one policy never overlap (the work queue hands out each key to one worker at a time), so
// compiling, binding and waiting for param informers run without a lock: a param or namespace change of
// one policy never waits behind the compile of another. The lock only guards the state map.
type vapReconciler struct {
	Client     client.Client
	Registry   policyRegistry
	Discovery  *views.Discovery
	Params     *views.Params
	Namespaces vap.NamespaceGetter
	// Compile compiles a policy whose results carry key; bindings and views are applied by Bind.
	Compile func(audit.PolicyKey, *admissionregistrationv1.ValidatingAdmissionPolicy) *vap.Compiled
	Resync  time.Duration
	Startup *startupGate
	Clock   clock.PassiveClock
	// Warnings records the Warning Events of policies that do not compile and of bindings that bind nothing.
	Warnings *warnings
	// AuditPolicies says whether the AuditPolicy CRD is installed: only then can an AuditPolicy own a policy.
	AuditPolicies bool

	mu     sync.Mutex
	state  map[audit.PolicyKey]*vapState // ValidatingAdmissionPolicies, and the AuditPolicies that stand for one
	rebind chan struct{}
	// discovered is closed once discovery was first read: a policy bound before would cover no resource.
	discovered chan struct{}
}

// vapState is what was registered for one policy. It is replaced whole, never modified, so readers may use
// it after the lock is released.
type vapState struct {
	compileKey string
	compiled   *vap.Compiled
	bindings   string
	resolver   *vap.StaticResolver
	policy     *vap.Policy
	paramKinds []schema.GroupVersionKind
	namespaces bool
	scanned    time.Time
	// rejected says that the policy does not compile and was not registered (see register).
	rejected bool
}

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconcile compiles and binds one policy, or removes the policy that is gone.
func (r *vapReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	select {
	case <-r.discovered:
	case <-ctx.Done():
		return ctrl.Result{}, ctx.Err()
	}
	defer r.Startup.Reconciled(audit.VAPKey(req.Name))
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, policy); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.removeMissing(ctx, req.Name)
		}
		return ctrl.Result{}, fmt.Errorf("getting ValidatingAdmissionPolicy %s: %w", req.Name, err)
	}
	owned, err := r.ownedByAuditPolicy(ctx, policy)
	if err != nil {
		return ctrl.Result{}, err
	}
	if owned {
		// Registered for an AuditPolicy: audited under the AuditPolicy's name, not twice.
		return ctrl.Result{}, r.remove(ctx, audit.VAPKey(req.Name))
	}
	bindings := &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}
	if err := r.Client.List(ctx, bindings, client.MatchingFields{bindingPolicyField: policy.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing bindings of %s: %w", policy.Name, err)
	}
	if !policy.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.remove(ctx, audit.VAPKey(policy.Name))
	}
	res, _, err := r.register(ctx, audit.VAPKey(policy.Name), policy, bindings.Items, false)
	return res, err
}

// ownedByAuditPolicy reports whether policy is the one celaudit registered for an AuditPolicy: its controller
// ownerReference names an AuditPolicy that exists with that uid. Any other policy is audited as itself, one
// that claims an AuditPolicy by a label or a reference to one that is gone included: labels and references
// are written by whoever writes the policy, and a policy must not hide from the audit by claiming an owner.
func (r *vapReconciler) ownedByAuditPolicy(ctx context.Context, policy *admissionregistrationv1.ValidatingAdmissionPolicy) (bool, error) {
	ref := auditpolicy.ControllerOf(policy)
	if ref == nil || !r.AuditPolicies {
		return false, nil
	}
	ap := &v1alpha1.AuditPolicy{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: ref.Name}, ap); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("getting AuditPolicy %s, the controller of ValidatingAdmissionPolicy %s: %w", ref.Name, policy.Name, err)
	}
	return ap.UID == ref.UID, nil
}

// register compiles (when its uid, generation or celaudit annotations changed) and binds policy, whose results
// carry key, and registers it with the scanner; it returns the compiled policy. The AuditPolicy
// reconciler registers the pair an AuditPolicy stands for through it too, so both share params, namespaces,
// discovery and resyncs.
//
// With requireCompiled, a policy with compile problems is not registered (it yields no results) until a
// change of it compiles: an AuditPolicy reports them in its Compiled condition instead. Without it, as the
// API server does for a ValidatingAdmissionPolicy, every evaluation is an error result.
func (r *vapReconciler) register(ctx context.Context, key audit.PolicyKey, policy *admissionregistrationv1.ValidatingAdmissionPolicy,
	bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding, requireCompiled bool) (ctrl.Result, *vap.Compiled, error) {
	sort.Slice(bindings, func(i, j int) bool { return bindings[i].Name < bindings[j].Name })
	interval := audit.ParseAnnotations(policy.Annotations).ResyncOr(r.Resync)
	now := r.Clock.Now()
	st := r.lookup(key)
	next := &vapState{
		compileKey: vap.CacheKey(policy),
		bindings:   bindingsSignature(bindings),
		resolver:   r.Discovery.Snapshot(),
		scanned:    now,
	}
	if st != nil && st.rejected && st.compileKey == next.compileKey {
		return ctrl.Result{}, st.compiled, nil
	}
	if st != nil && st.compileKey == next.compileKey && st.bindings == next.bindings && st.resolver == next.resolver {
		return r.resync(key, st, interval, now), st.compiled, nil
	}
	next.compiled = r.compiled(ctx, key, policy, st, next.compileKey)
	if requireCompiled && len(next.compiled.Problems()) > 0 {
		next.rejected = true
		r.store(key, next)
		r.Registry.RemovePolicy(key)
		return ctrl.Result{}, next.compiled, r.Params.Track(ctx, key, nil, nil)
	}
	p, err := r.bind(ctx, key, policy, bindings, next)
	if err != nil {
		return ctrl.Result{}, next.compiled, err
	}
	// Only discovery changed, and not in a way that changes what the policy decides: results stay valid, only
	// newly covered resources need reading.
	onlyDiscovery := st != nil && !st.rejected && st.compileKey == next.compileKey && st.bindings == next.bindings && sameParamResolution(st, next)
	if onlyDiscovery {
		next.scanned = st.scanned
	}
	r.store(key, next)
	if onlyDiscovery {
		r.Registry.ReplacePolicy(p)
	} else {
		r.Registry.SetPolicy(p)
	}
	return requeueIn(interval, now.Sub(next.scanned)), next.compiled, nil
}

// resync rescans the unchanged policy key, registered as st, when its periodic rescan (every interval) is
// due, and returns the result that brings it back for the next one.
func (r *vapReconciler) resync(key audit.PolicyKey, st *vapState, interval time.Duration, now time.Time) ctrl.Result {
	if interval <= 0 || now.Sub(st.scanned) < interval {
		return requeueIn(interval, now.Sub(st.scanned))
	}
	r.Registry.Rescan(key, "")
	rescanned := *st
	rescanned.scanned = now
	r.store(key, &rescanned)
	return requeueIn(interval, 0)
}

// compiled returns policy compiled: st's compilation when its compileKey is the same, a new one otherwise,
// whose problems a ValidatingAdmissionPolicy gets a Warning Event for.
func (r *vapReconciler) compiled(ctx context.Context, key audit.PolicyKey, policy *admissionregistrationv1.ValidatingAdmissionPolicy,
	st *vapState, compileKey string) *vap.Compiled {
	if st != nil && st.compileKey == compileKey {
		return st.compiled
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Compiling policy", "policy", key.String(), "generation", policy.Generation)
	compiled := r.Compile(key, policy)
	if key.Source == audit.SourceVAP {
		// An AuditPolicy reports its problems on itself: policy is only what it stands for.
		r.Warnings.compileFailed(policy, kindVAP, compiled.Problems())
	}
	return compiled
}

// bind binds next's compiled policy to bindings and the views, records in next what the bound policy reads,
// and has the params it reads tracked; a ValidatingAdmissionPolicy's bindings that find no params, and a
// policy whose params are not read, get Warning Events.
func (r *vapReconciler) bind(ctx context.Context, key audit.PolicyKey, policy *admissionregistrationv1.ValidatingAdmissionPolicy,
	bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding, next *vapState) (*vap.Policy, error) {
	refs := make([]*admissionregistrationv1.ValidatingAdmissionPolicyBinding, len(bindings))
	for i := range bindings {
		refs[i] = &bindings[i]
	}
	p := engine.Bind(next.compiled, refs, engine.Views{Resources: next.resolver, Namespaces: r.Namespaces, Params: r.Params})
	next.policy, next.paramKinds, next.namespaces = p, p.ParamKinds(), p.DependsOnNamespaces()
	if err := r.Params.Track(ctx, key, paramKind(next.paramKinds), paramRefs(bindings)); err != nil {
		return nil, err
	}
	if key.Source == audit.SourceVAP {
		r.Warnings.bindingsChecked(policy.Name, bindings, func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) (string, string) {
			return paramProblem(b, paramKind(next.paramKinds), next.resolver, r.Params)
		})
		r.Warnings.paramsNotRead(policy, kindVAP, r.Params, paramKind(next.paramKinds), len(paramRefs(bindings)))
	}
	return p, nil
}

// subresources returns the subresources the registered policy of key covers, which no audit judges.
func (r *vapReconciler) subresources(key audit.PolicyKey) []string {
	if st := r.lookup(key); st != nil && st.policy != nil {
		return st.policy.Subresources()
	}
	return nil
}

func (r *vapReconciler) lookup(key audit.PolicyKey) *vapState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state[key]
}

func (r *vapReconciler) store(key audit.PolicyKey, st *vapState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == nil {
		r.state = map[audit.PolicyKey]*vapState{}
	}
	r.state[key] = st
}

// sameParamResolution reports whether the policy's param kinds resolve the same way in both states.
func sameParamResolution(a, b *vapState) bool {
	if !reflect.DeepEqual(a.paramKinds, b.paramKinds) {
		return false
	}
	for _, gvk := range a.paramKinds {
		_, errA := a.resolver.ResourceForKind(gvk)
		_, errB := b.resolver.ResourceForKind(gvk)
		if (errA == nil) != (errB == nil) {
			return false
		}
	}
	return true
}

func bindingsSignature(bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding) string {
	var b strings.Builder
	for _, x := range bindings {
		fmt.Fprintf(&b, "%s/%s/%d;", x.Name, x.UID, x.Generation)
	}
	return b.String()
}

// removeMissing removes the policy name, which does not exist, and warns on each binding that names it.
func (r *vapReconciler) removeMissing(ctx context.Context, name string) error {
	bindings := &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}
	if err := r.Client.List(ctx, bindings, client.MatchingFields{bindingPolicyField: name}); err != nil {
		return fmt.Errorf("listing bindings of %s: %w", name, err)
	}
	r.Warnings.bindingsChecked(name, bindings.Items, missingPolicy(name))
	return r.remove(ctx, audit.VAPKey(name))
}

// remove unregisters the policy of key and stops reading its params.
func (r *vapReconciler) remove(ctx context.Context, key audit.PolicyKey) error {
	r.mu.Lock()
	delete(r.state, key)
	r.mu.Unlock()
	if key.Source == audit.SourceVAP {
		r.Warnings.forget(kindVAP, key.Name)
	}
	r.Registry.RemovePolicy(key)
	return r.Params.Track(ctx, key, nil, nil)
}

func paramKind(kinds []schema.GroupVersionKind) *schema.GroupVersionKind {
	if len(kinds) == 0 {
		return nil
	}
	return &kinds[0]
}

func paramRefs(bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding) []*admissionregistrationv1.ParamRef {
	var out []*admissionregistrationv1.ParamRef
	for i := range bindings {
		if ref := bindings[i].Spec.ParamRef; ref != nil {
			out = append(out, ref)
		}
	}
	return out
}

// paramsChanged rescans the policies whose bindings read one of objs (the versions of a changed object of
// kind gvk) as a param: everywhere, or only in the namespaces where it is read. Changes to other objects of
// the kind, such as ConfigMaps that are not params, cause no work.
func (r *vapReconciler) paramsChanged(gvk schema.GroupVersionKind, objs ...metav1.Object) {
	for key, st := range r.snapshot() {
		if !slices.Contains(st.paramKinds, gvk) {
			continue
		}
		if len(objs) == 0 { // the params of gvk can be read now
			r.Registry.Rescan(key, "")
			continue
		}
		namespaces := map[string]bool{}
		for _, o := range objs {
			all, nss := st.policy.ParamScope(o)
			if all {
				r.Registry.Rescan(key, "")
				namespaces = nil
				break
			}
			for _, ns := range nss {
				namespaces[ns] = true
			}
		}
		for ns := range namespaces {
			r.Registry.Rescan(key, ns)
		}
	}
}

// namespaceDependents returns the keys of the policies whose results depend on namespaces.
func (r *vapReconciler) namespaceDependents() []audit.PolicyKey {
	var out []audit.PolicyKey
	for key, st := range r.snapshot() {
		if st.namespaces {
			out = append(out, key)
		}
	}
	slices.SortFunc(out, audit.PolicyKey.Compare)
	return out
}

// snapshot returns the registered states; they are never modified, so they are read without the lock.
func (r *vapReconciler) snapshot() map[audit.PolicyKey]*vapState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.state)
}

// discoveryChanged binds every policy again against the new discovery snapshot.
func (r *vapReconciler) discoveryChanged() {
	select {
	case r.rebind <- struct{}{}:
	default:
	}
}

// listAtStartup reads discovery, which every bind needs, then tells the start-up gate which policies the
// synced cache holds.
func (r *vapReconciler) listAtStartup(ctx context.Context) error {
	if err := r.Discovery.Refresh(ctx); err != nil {
		return err
	}
	close(r.discovered)
	return r.Startup.ListFrom(ctx, r.Client, audit.SourceVAP, &admissionregistrationv1.ValidatingAdmissionPolicyList{})
}

// SetupWithManager registers the reconciler, the binding index and the start-up registration with mgr.
func (r *vapReconciler) SetupWithManager(mgr ctrl.Manager, opts ...func(*ctrl.Builder) *ctrl.Builder) error {
	if r.Client == nil || r.Registry == nil || r.Discovery == nil || r.Params == nil || r.Namespaces == nil || r.Compile == nil || r.Startup == nil || r.Warnings == nil {
		return fmt.Errorf("vapReconciler needs Client, Registry, Discovery, Params, Namespaces, Compile, Startup and Warnings")
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.rebind = make(chan struct{}, 1)
	r.discovered = make(chan struct{})
	r.Discovery.OnChange(r.discoveryChanged)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, bindingPolicyField,
		func(o client.Object) []string {
			return []string{o.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding).Spec.PolicyName}
		}); err != nil {
		return fmt.Errorf("indexing bindings by policy: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return ctx.Err()
		}
		return r.listAtStartup(ctx)
	})); err != nil {
		return fmt.Errorf("adding policy start-up listing: %w", err)
	}
	toPolicy := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		b := o.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: b.Spec.PolicyName}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		For(&admissionregistrationv1.ValidatingAdmissionPolicy{}).
		Named("validatingadmissionpolicy").
		Watches(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, toPolicy).
		WatchesRawSource(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			go r.enqueueAllOnRebind(ctx, q)
			return nil
		}))
	if r.AuditPolicies {
		if err := r.watchOwners(mgr, b); err != nil {
			return err
		}
	}
	for _, o := range opts {
		b = o(b)
	}
	return b.Complete(r)
}

// watchOwners reconciles the policies whose controller ownerReference names an AuditPolicy whenever one of
// that name is created or deleted: whether they are owned, and so audited under the AuditPolicy, changes.
func (r *vapReconciler) watchOwners(mgr ctrl.Manager, b *ctrl.Builder) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &admissionregistrationv1.ValidatingAdmissionPolicy{}, controllingAuditPolicyField,
		func(o client.Object) []string {
			if ref := auditpolicy.ControllerOf(o); ref != nil {
				return []string{ref.Name}
			}
			return nil
		}); err != nil {
		return fmt.Errorf("indexing policies by controlling AuditPolicy: %w", err)
	}
	toClaimed := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		policies := &admissionregistrationv1.ValidatingAdmissionPolicyList{}
		if err := r.Client.List(ctx, policies, client.MatchingFields{controllingAuditPolicyField: o.GetName()}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the policies an AuditPolicy may own failed", "auditPolicy", o.GetName())
			return nil
		}
		out := make([]reconcile.Request, 0, len(policies.Items))
		for _, p := range policies.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
		return out
	})
	b.Watches(&v1alpha1.AuditPolicy{}, toClaimed, builder.WithPredicates(predicate.Funcs{
		UpdateFunc: func(event.UpdateEvent) bool { return false },
	}))
	return nil
}

func (r *vapReconciler) enqueueAllOnRebind(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.rebind:
		}
		policies := &admissionregistrationv1.ValidatingAdmissionPolicyList{}
		if err := r.Client.List(ctx, policies); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing policies to bind again failed")
			continue
		}
		for _, p := range policies.Items {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
	}
}
