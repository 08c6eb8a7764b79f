package controllers

import (
	"context"
	"fmt"
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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
)

// VAPSource names the ValidatingAdmissionPolicy source in the start-up gate.
const VAPSource = "vap"

// bindingPolicyField indexes bindings by the policy they bind.
const bindingPolicyField = "spec.policyName"

// VAPReconciler keeps one audit policy per ValidatingAdmissionPolicy registered with the scan engine: the
// policy compiled once per uid and generation, bound to its bindings and to the served resources. A binding
// or discovery change binds again without recompiling; a param or namespace change rescans without binding.
type VAPReconciler struct {
	Client     client.Client
	Registry   PolicyRegistry
	Discovery  *views.Discovery
	Params     *views.Params
	Namespaces vap.NamespaceGetter
	Options    vap.Options
	Resync     time.Duration
	Gate       *Gate
	Clock      clock.PassiveClock

	mu     sync.Mutex
	state  map[string]*vapState
	rebind chan struct{}
}

type vapState struct {
	compileKey string
	compiled   *vap.Compiled
	bindings   string
	resolver   *vap.StaticResolver
	policy     *vap.Policy
	resources  []schema.GroupVersionResource
	paramKinds []schema.GroupVersionKind
	namespaces bool
	scanned    time.Time
}

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconcile compiles and binds one policy, or removes the policy that is gone.
func (r *VAPReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, policy); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.remove(ctx, req.Name)
		}
		return ctrl.Result{}, fmt.Errorf("getting ValidatingAdmissionPolicy %s: %w", req.Name, err)
	}
	bindings := &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}
	if err := r.Client.List(ctx, bindings, client.MatchingFields{bindingPolicyField: policy.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing bindings of %s: %w", policy.Name, err)
	}
	return r.reconcile(ctx, policy, bindings.Items)
}

func (r *VAPReconciler) reconcile(ctx context.Context, policy *admissionregistrationv1.ValidatingAdmissionPolicy, bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding) (ctrl.Result, error) {
	if !policy.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.remove(ctx, policy.Name)
	}
	sort.Slice(bindings, func(i, j int) bool { return bindings[i].Name < bindings[j].Name })
	compileKey := vap.CacheKey(policy) + "\n" + celauditAnnotations(policy.Annotations)
	bindingsKey := bindingsSignature(bindings)
	resolver := r.Discovery.Snapshot()
	interval := resyncInterval(policy.Annotations, r.Resync)
	now := r.Clock.Now()
	key := policyKeyVAP(policy.Name)

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == nil {
		r.state = map[string]*vapState{}
	}
	st := r.state[policy.Name]
	if st != nil && st.compileKey == compileKey && st.bindings == bindingsKey && st.resolver == resolver {
		if interval > 0 && now.Sub(st.scanned) >= interval {
			r.Registry.Rescan(key, "")
			st.scanned = now
		}
		return requeueIn(interval, now.Sub(st.scanned)), nil
	}

	next := &vapState{compileKey: compileKey, bindings: bindingsKey, resolver: resolver, scanned: now}
	if st != nil && st.compileKey == compileKey {
		next.compiled = st.compiled
	} else {
		ctrl.LoggerFrom(ctx).V(1).Info("Compiling ValidatingAdmissionPolicy", "generation", policy.Generation)
		next.compiled = vap.CompilePolicy(policy, r.Options)
	}
	refs := make([]*admissionregistrationv1.ValidatingAdmissionPolicyBinding, len(bindings))
	for i := range bindings {
		refs[i] = &bindings[i]
	}
	p := next.compiled.Bind(refs, vap.Deps{Namespaces: r.Namespaces, Params: r.Params, Resolver: resolver})
	next.policy, next.resources, next.paramKinds, next.namespaces = p, p.Resources(), p.ParamKinds(), p.DependsOnNamespaces()
	if err := r.Params.Track(ctx, policy.Name, paramKind(next.paramKinds), paramRefs(bindings)); err != nil {
		return ctrl.Result{}, err
	}
	// Only discovery changed, and not in a way that changes what the policy decides: results stay valid, only
	// newly covered resources need reading.
	if st != nil && st.compileKey == compileKey && st.bindings == bindingsKey && sameParamResolution(st, next) {
		r.Registry.ReplacePolicy(p)
		next.scanned = st.scanned
	} else {
		r.Registry.SetPolicy(p)
	}
	r.state[policy.Name] = next
	return requeueIn(interval, now.Sub(next.scanned)), nil
}

func requeueIn(interval, elapsed time.Duration) ctrl.Result {
	if interval <= 0 {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: max(interval-elapsed, time.Second)}
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

func (r *VAPReconciler) remove(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.state, name)
	r.Registry.RemovePolicy(policyKeyVAP(name))
	return r.Params.Track(ctx, name, nil, nil)
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

// ParamsChanged rescans the policies whose bindings read one of objs (the versions of a changed object of
// kind gvk) as a param: everywhere, or only in the namespaces where it is read. Changes to other objects of
// the kind, such as ConfigMaps that are not params, cause no work.
func (r *VAPReconciler) ParamsChanged(gvk schema.GroupVersionKind, objs ...metav1.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, st := range r.state {
		if !slices.Contains(st.paramKinds, gvk) {
			continue
		}
		key := policyKeyVAP(name)
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

// NamespaceDependents returns the keys of the policies whose results depend on namespaces.
func (r *VAPReconciler) NamespaceDependents() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for name, st := range r.state {
		if st.namespaces {
			out = append(out, policyKeyVAP(name))
		}
	}
	sort.Strings(out)
	return out
}

// DiscoveryChanged binds every policy again against the new discovery snapshot.
func (r *VAPReconciler) DiscoveryChanged() {
	select {
	case r.rebind <- struct{}{}:
	default:
	}
}

// registerAll refreshes discovery, registers every policy the cache holds and opens the gate.
func (r *VAPReconciler) registerAll(ctx context.Context) error {
	if err := r.Discovery.Refresh(ctx); err != nil {
		return err
	}
	policies := &admissionregistrationv1.ValidatingAdmissionPolicyList{}
	if err := r.Client.List(ctx, policies); err != nil {
		return fmt.Errorf("listing ValidatingAdmissionPolicies: %w", err)
	}
	bindings := &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}
	if err := r.Client.List(ctx, bindings); err != nil {
		return fmt.Errorf("listing ValidatingAdmissionPolicyBindings: %w", err)
	}
	byPolicy := map[string][]admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, b := range bindings.Items {
		byPolicy[b.Spec.PolicyName] = append(byPolicy[b.Spec.PolicyName], b)
	}
	for i := range policies.Items {
		p := &policies.Items[i]
		if _, err := r.reconcile(ctx, p, byPolicy[p.Name]); err != nil {
			return err
		}
	}
	r.Gate.Done(VAPSource)
	return nil
}

// SetupWithManager registers the reconciler, the binding index and the start-up registration with mgr.
func (r *VAPReconciler) SetupWithManager(mgr ctrl.Manager, opts ...func(*ctrl.Builder) *ctrl.Builder) error {
	if r.Client == nil || r.Registry == nil || r.Discovery == nil || r.Params == nil || r.Namespaces == nil || r.Gate == nil {
		return fmt.Errorf("VAPReconciler needs Client, Registry, Discovery, Params, Namespaces and Gate")
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.rebind = make(chan struct{}, 1)
	r.Discovery.OnChange(r.DiscoveryChanged)
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
		return r.registerAll(ctx)
	})); err != nil {
		return fmt.Errorf("adding policy start-up registration: %w", err)
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
	for _, o := range opts {
		b = o(b)
	}
	return b.Complete(r)
}

func (r *VAPReconciler) enqueueAllOnRebind(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
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

func policyKeyVAP(name string) string { return "vap/" + name }
