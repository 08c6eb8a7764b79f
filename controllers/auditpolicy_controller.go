package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/auditpolicy"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/shard"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
)

// conflictRetry is how soon an AuditPolicy whose status write conflicted with a change is reconciled again.
const conflictRetry = 200 * time.Millisecond

// policySummaries serves the per-policy summaries of the last complete audit.
type policySummaries interface {
	// Summary returns the policy's summary at the last complete audit, whether there was one, and when that
	// audit's summaries were taken.
	Summary(key audit.PolicyKey) (s results.Summary, complete bool, at time.Time)
}

// auditPolicyReconciler audits each AuditPolicy as the ValidatingAdmissionPolicy and binding it stands for,
// registers that pair with the API server while its enforcement is Warn or Deny (and removes it otherwise),
// promotes it when its promotion gate allows, and writes its status.
//
// The pair is compiled, bound and registered with the scanner by the ValidatingAdmissionPolicy
// reconciler's register, under the AuditPolicy's key: params, namespaces, discovery changes and resyncs work
// exactly as for a ValidatingAdmissionPolicy, and the registered copy is not audited a second time.
type auditPolicyReconciler struct {
	Client    client.Client
	Policies  *vapReconciler
	Summaries policySummaries
	Events    EventRecorder
	// Recheck asks for the summaries to be taken again: after a registration, an audit must complete after it
	// even when no result changes (a policy that matches nothing), or the status would wait forever.
	Recheck func()
	// Warnings records the Warning Events of AuditPolicies that cannot be audited as written, once per
	// generation, as it does for policies and CRDs.
	Warnings *warnings
	// Manage allows registering ValidatingAdmissionPolicies and bindings with the API server for Warn and
	// Deny (--manage-admission-policies). Without it the policy is audited as if enforced, and its Enforced
	// condition says that nothing is registered.
	Manage bool
	// Exemptions are left out of every pair: the audit leaves out their namespaces and resources, and the
	// registered pair their users and groups too.
	Exemptions auditpolicy.Exemptions
	Startup    *startupGate
	Clock      clock.PassiveClock

	// Discovery changes bind every AuditPolicy again.
	Discovery *views.Discovery
	// Failures logs failed writes (status, registered pairs) once per cause, retried with backoff.
	Failures *apiFailures

	// Publisher and Rollups exist when the audit is sharded (nil otherwise). Every member then reconciles
	// every AuditPolicy, registers it with its own scanner and publishes its share of the audit with
	// Publisher; the leader alone writes the status, registers the pair and promotes, from the audit of all
	// members that Rollups adds up.
	Publisher *shardPublisher
	Rollups   *shardRollups
	// Leads reports whether this process is the leader (nil: it is; without sharding only the leader runs
	// the reconciler).
	Leads func() bool

	// queue is the controller's work queue, once it started: summary and discovery changes enqueue into it.
	queue  atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]
	rebind chan struct{}
	mu     sync.Mutex
	// registered is when each AuditPolicy was last registered or rescanned: only audits that complete after
	// it describe it.
	registered map[string]time.Time
	// pending holds the AuditPolicies whose status waits for a complete audit.
	pending map[string]bool
}

// +kubebuilder:rbac:groups=audit.celaudit.io,resources=auditpolicies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=audit.celaudit.io,resources=auditpolicies/status,verbs=get;update;patch

// Reconcile audits one AuditPolicy, registers or removes its admission policy and writes its status.
func (r *auditPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	select {
	case <-r.Policies.discovered:
	case <-ctx.Done():
		return ctrl.Result{}, ctx.Err()
	}
	key := audit.AuditPolicyKey(req.Name)
	defer r.Startup.Reconciled(key)
	ap := &v1alpha1.AuditPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, ap); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.remove(ctx, req.Name, "")
		}
		return ctrl.Result{}, fmt.Errorf("getting AuditPolicy %s: %w", req.Name, err)
	}
	if !ap.DeletionTimestamp.IsZero() {
		if !r.leads() {
			// The leader removes the pair, then the finalizer; the AuditPolicy's removal unregisters it here.
			return ctrl.Result{}, nil
		}
		return retryOnConflict(ctx, ctrl.Result{}, r.finalize(ctx, ap))
	}
	if !r.leads() {
		result, _, err := r.observe(ctx, ap)
		return result, err
	}
	result, o, err := r.audit(ctx, ap)
	if err != nil {
		return retryOnConflict(ctx, result, err)
	}
	if err := r.writeStatus(ctx, ap, o); err != nil {
		return retryOnConflict(ctx, result, err)
	}
	wait, err := r.promote(ctx, ap)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wait > 0 && (result.RequeueAfter == 0 || wait < result.RequeueAfter) {
		result.RequeueAfter = wait
	}
	return result, nil
}

// retryOnConflict returns err, except a conflict: the AuditPolicy changed since it was read (its enforcement
// was just moved, say), and it is reconciled again from the new version without reporting an error.
func retryOnConflict(ctx context.Context, result ctrl.Result, err error) (ctrl.Result, error) {
	if err != nil && apierrors.IsConflict(err) {
		ctrl.LoggerFrom(ctx).V(1).Info("AuditPolicy changed while it was written; reconciling again")
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return result, err
}

// leads reports whether this process writes what the leader alone writes.
func (r *auditPolicyReconciler) leads() bool { return r.Leads == nil || r.Leads() }

// audit registers ap with the scanner and, for Warn and Deny, with the API server when the enforcement
// gate allows, and gathers what its status is made of: the audit of this process or, sharded, of all
// members.
func (r *auditPolicyReconciler) audit(ctx context.Context, ap *v1alpha1.AuditPolicy) (ctrl.Result, auditPolicyObservation, error) {
	key := audit.AuditPolicyKey(ap.Name)
	result, o, err := r.observe(ctx, ap)
	if err != nil {
		return result, o, err
	}
	if r.Rollups != nil {
		roll, err := r.Rollups.Rollup(ctx, ap.Name, ap.Generation)
		if err != nil {
			return result, o, err
		}
		o.summary, o.complete, o.at, o.pending = roll.summary, roll.complete, roll.at, roll.pending
		ctrl.LoggerFrom(ctx).V(1).Info("Added up the members' audits", "complete", roll.complete, "pending", roll.pending)
	}
	paramNote := r.warn(ap, key, o.problems)
	var subresources []string
	if st := r.Policies.lookup(key); st != nil && st.policy != nil {
		subresources = st.policy.Subresources()
	}
	o.safety = results.SafetyOf(o.summary, o.complete, subresources)
	if r.Rollups != nil {
		r.Rollups.record(ap.Name, o.complete, o.summary, o.safety)
	}
	gate := gateInputs{
		enforcement: ap.EnforcementOrDefault(),
		generation:  ap.Generation,
		override:    ap.Spec.EnforcementOverride,
		audited:     o.complete,
		pending:     o.pending,
		safety:      o.safety,
		configError: configurationError(ap.Spec.FailurePolicy, paramNote, o.summary.Configuration),
	}
	if o.enforced, o.admissionPolicy, err = r.enforce(ctx, ap, len(o.problems) == 0, gate); err != nil {
		return result, o, err
	}
	return result, o, nil
}

// observe registers ap with this process's scanner and returns this process's own audit of it. In a sharded
// audit that is the member's share, which it publishes in its AuditShard.
func (r *auditPolicyReconciler) observe(ctx context.Context, ap *v1alpha1.AuditPolicy) (ctrl.Result, auditPolicyObservation, error) {
	key := audit.AuditPolicyKey(ap.Name)
	pair := auditpolicy.ToAdmission(ap, r.Exemptions)
	before := r.Policies.lookup(key)
	result, compiled, err := r.Policies.register(ctx, key, pair.Policy, []admissionregistrationv1.ValidatingAdmissionPolicyBinding{*pair.Binding}, true)
	if err != nil {
		return result, auditPolicyObservation{}, fmt.Errorf("registering AuditPolicy %s: %w", ap.Name, err)
	}
	if r.Policies.lookup(key) != before {
		// Registered, bound again or rescanned: the scan is no longer synced, and results taken before now
		// do not describe this generation.
		r.markRegistered(ap.Name, r.Clock.Now())
		r.Recheck()
	}
	o := auditPolicyObservation{problems: compiled.Problems(), exemptions: r.Exemptions.List()}
	o.summary, o.complete, o.at = r.Summaries.Summary(key)
	o.complete = r.auditedSince(ap.Name, o.complete, o.at, len(o.problems) == 0)
	if r.Publisher != nil && len(o.problems) == 0 {
		r.Publisher.Observed(ap.Name, ap.Generation, o.complete, o.at, o.summary)
	}
	return result, o, nil
}

// finalize removes what celaudit registered for ap, which is being deleted, then its finalizer. Without
// --manage-admission-policies celaudit may not delete admission policies: the garbage collector removes
// the pair, which ap owns, and the deletion is not held up.
func (r *auditPolicyReconciler) finalize(ctx context.Context, ap *v1alpha1.AuditPolicy) error {
	if err := r.remove(ctx, ap.Name, ap.UID); err != nil && (r.Manage || !apierrors.IsForbidden(err)) {
		return err
	}
	return r.setFinalizer(ctx, ap, false)
}

// remove stops auditing the AuditPolicy named name and deletes the pair registered for it: the one its
// controller ownerReference names by uid, or, when uid is "" (the AuditPolicy is gone), any AuditPolicy of
// that name, since none exists. The garbage collector would delete the pair too; celaudit does not wait for
// it, so no request is judged by a policy that is gone.
func (r *auditPolicyReconciler) remove(ctx context.Context, name string, uid types.UID) error {
	r.mu.Lock()
	delete(r.registered, name)
	delete(r.pending, name)
	r.Warnings.forget(kindAuditPolicy, name)
	r.mu.Unlock()
	if r.Publisher != nil {
		r.Publisher.Forget(name)
		r.Rollups.forget(name)
	}
	if err := r.Policies.remove(ctx, audit.AuditPolicyKey(name)); err != nil {
		return err
	}
	if !r.leads() {
		return nil
	}
	return r.deleteRegistered(ctx, name, uid)
}

// enforce registers the pair for Warn and Deny when the enforcement gate allows, or deletes it for Audit, and
// returns the Enforced condition and the name of the registered policy ("" when none).
func (r *auditPolicyReconciler) enforce(ctx context.Context, ap *v1alpha1.AuditPolicy, compiles bool, in gateInputs) (metav1.Condition, string, error) {
	cond := metav1.Condition{Type: v1alpha1.ConditionEnforced, Status: metav1.ConditionFalse}
	if reason, message, err := r.notEnforced(ctx, ap, compiles); err != nil || reason != "" {
		cond.Reason, cond.Message = reason, message
		return cond, "", err
	}
	d := enforcementGate(in)
	if !d.register {
		return r.refused(ctx, ap, cond, d)
	}
	return r.registerPair(ctx, ap, cond, d)
}

// notEnforced returns the reason and message of the Enforced condition when ap's pair is not to be registered
// whatever the enforcement gate says: enforcement is Audit (the pair is then deleted), celaudit may not
// register admission policies, or ap does not compile. It returns no reason otherwise.
func (r *auditPolicyReconciler) notEnforced(ctx context.Context, ap *v1alpha1.AuditPolicy, compiles bool) (reason, message string, err error) {
	e := ap.EnforcementOrDefault()
	switch {
	case e == v1alpha1.Audit:
		if err := r.deleteRegistered(ctx, ap.Name, ap.UID); err != nil {
			return "", "", err
		}
		if r.Manage {
			if err := r.setFinalizer(ctx, ap, false); err != nil {
				return "", "", err
			}
		}
		return ReasonAuditOnly, "enforcement is Audit: celaudit audits the policy and nothing is registered with the API server", nil
	case !r.Manage:
		return ReasonManagementOff, fmt.Sprintf("enforcement is %s, but celaudit runs without --manage-admission-policies: nothing is registered; "+
			"the policy is audited as if it were (register the ValidatingAdmissionPolicy and binding yourself to enforce it)", e), nil
	case !compiles:
		name := auditpolicy.AdmissionName(ap.Name)
		return ReasonCompileFailed, fmt.Sprintf("the policy does not compile, so it is not registered as %s; a ValidatingAdmissionPolicy %s registered earlier is left as it was", name, name), nil
	}
	return "", "", nil
}

// refused returns the Enforced condition of ap when the enforcement gate refuses its pair (decision d): the
// pair registered earlier, if any, is left as it is, and its name returned.
func (r *auditPolicyReconciler) refused(ctx context.Context, ap *v1alpha1.AuditPolicy, cond metav1.Condition, d gateDecision) (metav1.Condition, string, error) {
	live, err := r.liveActions(ctx, ap)
	if err != nil {
		return cond, "", err
	}
	name := auditpolicy.AdmissionName(ap.Name)
	cond.Reason = ReasonNotSafeToEnforce
	left, registered := "nothing is registered", ""
	if live != nil {
		left, registered = fmt.Sprintf("the registered pair %s is left as it is, with validationActions %v", name, live), name
	}
	cond.Message = fmt.Sprintf("enforcement is %s, but the pair is not registered with it: %s; %s. To register it anyway, set spec.enforcementOverride.reason",
		ap.EnforcementOrDefault(), d.why, left)
	return cond, registered, nil
}

// registerPair registers ap's pair with the API server, as the enforcement gate allows (decision d), and
// returns the Enforced condition and the name of the registered policy.
func (r *auditPolicyReconciler) registerPair(ctx context.Context, ap *v1alpha1.AuditPolicy, cond metav1.Condition, d gateDecision) (metav1.Condition, string, error) {
	// The finalizer is on before anything is registered: deleting the AuditPolicy then removes the pair,
	// with or without a garbage collector.
	if err := r.setFinalizer(ctx, ap, true); err != nil {
		return cond, "", err
	}
	name, e := auditpolicy.AdmissionName(ap.Name), ap.EnforcementOrDefault()
	want := auditpolicy.Owned(ap, r.Exemptions)
	if taken, err := r.apply(ctx, want.Policy, &admissionregistrationv1.ValidatingAdmissionPolicy{}, ap); err != nil || taken {
		return registerFailure(cond, "ValidatingAdmissionPolicy", name, taken, err), "", nil
	}
	if taken, err := r.apply(ctx, want.Binding, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, ap); err != nil || taken {
		return registerFailure(cond, "ValidatingAdmissionPolicyBinding", name, taken, err), name, nil
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, ReasonRegistered
	cond.Message = fmt.Sprintf("ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding %s enforce the policy with validationActions [%s]", name, e)
	if d.byOverride {
		reason := ap.Spec.EnforcementOverride.Reason
		cond.Reason = ReasonRegisteredWithOverride
		cond.Message = fmt.Sprintf("%s by spec.enforcementOverride (%q), although %s", cond.Message, reason, d.why)
		r.Warnings.warn(ap, kindAuditPolicy, "", ReasonRegisteredWithOverride, "Enforce",
			fmt.Sprintf("Registered with validationActions [%s] by spec.enforcementOverride (%q), although %s", e, reason, d.why))
	}
	return cond, name, nil
}

// liveActions returns the validationActions of the binding registered for ap, nil when there is none of
// its own.
func (r *auditPolicyReconciler) liveActions(ctx context.Context, ap *v1alpha1.AuditPolicy) ([]admissionregistrationv1.ValidationAction, error) {
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: auditpolicy.AdmissionName(ap.Name)}, b); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting the binding of AuditPolicy %s: %w", ap.Name, err)
	}
	if !metav1.IsControlledBy(b, ap) {
		return nil, nil
	}
	return b.Spec.ValidationActions, nil
}

// setFinalizer adds or removes v1alpha1.FinalizerAdmissionPolicy on ap, when it is not already so. The
// patch carries ap's resource version: it fails with a conflict rather than drop another finalizer.
func (r *auditPolicyReconciler) setFinalizer(ctx context.Context, ap *v1alpha1.AuditPolicy, on bool) error {
	if controllerutil.ContainsFinalizer(ap, v1alpha1.FinalizerAdmissionPolicy) == on {
		return nil
	}
	before := ap.DeepCopy()
	if on {
		controllerutil.AddFinalizer(ap, v1alpha1.FinalizerAdmissionPolicy)
	} else {
		controllerutil.RemoveFinalizer(ap, v1alpha1.FinalizerAdmissionPolicy)
	}
	if err := r.Client.Patch(ctx, ap, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if !on && apierrors.IsNotFound(err) {
			return nil // gone with its last finalizer
		}
		return fmt.Errorf("setting the finalizer of AuditPolicy %s to %t: %w", ap.Name, on, err)
	}
	return nil
}

func registerFailure(cond metav1.Condition, kind, name string, taken bool, err error) metav1.Condition {
	if taken {
		cond.Reason = ReasonNameTaken
		cond.Message = fmt.Sprintf("%s %s exists and is not celaudit's: rename the AuditPolicy or remove it", kind, name)
		return cond
	}
	cond.Reason = ReasonRegisterFailed
	cond.Message = fmt.Sprintf("the API server did not accept %s %s: %v", kind, name, err)
	return cond
}

// apply creates want, or updates the existing object to it when it differs; an existing object that owner
// does not control (its controller ownerReference does not name owner's uid) is left alone (taken), whatever
// its labels say. existing is an empty object of want's type.
func (r *auditPolicyReconciler) apply(ctx context.Context, want, existing client.Object, owner *v1alpha1.AuditPolicy) (taken bool, err error) {
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), existing); err != nil {
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		ctrl.LoggerFrom(ctx).Info("Registering admission policy", "kind", fmt.Sprintf("%T", want), "name", want.GetName())
		return false, r.Client.Create(ctx, want)
	}
	if !metav1.IsControlledBy(existing, owner) {
		return true, nil
	}
	if sameRegistration(want, existing) {
		return false, nil
	}
	want.SetResourceVersion(existing.GetResourceVersion())
	return false, r.Client.Update(ctx, want)
}

// sameRegistration reports whether the registered object already holds what celaudit wants it to. Labels do
// not count: they are for selecting the pair, written with it, and an edit of them changes nothing celaudit
// decides (ownership is the controller ownerReference).
func sameRegistration(want, have client.Object) bool {
	if !equality.Semantic.DeepEqual(want.GetAnnotations(), have.GetAnnotations()) ||
		!equality.Semantic.DeepEqual(want.GetOwnerReferences(), have.GetOwnerReferences()) {
		return false
	}
	switch w := want.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		// The API server defaults the spec it stores; compare what it would store.
		h := have.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		return equality.Semantic.DeepEqual(vap.Defaulted(w).Spec, vap.Defaulted(h).Spec)
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		h := have.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		return equality.Semantic.DeepEqual(vap.DefaultedBinding(w).Spec, vap.DefaultedBinding(h).Spec)
	}
	return false
}

// deleteRegistered deletes the pair registered for the AuditPolicy named name: the objects whose controller
// ownerReference names it by uid, or, when uid is "", names an AuditPolicy of that name (which is gone).
// Labels do not count: a labelled pair of somebody else's is left alone.
func (r *auditPolicyReconciler) deleteRegistered(ctx context.Context, name string, uid types.UID) error {
	key := client.ObjectKey{Name: auditpolicy.AdmissionName(name)}
	for _, obj := range []client.Object{&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, &admissionregistrationv1.ValidatingAdmissionPolicy{}} {
		if err := r.Client.Get(ctx, key, obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("getting %s: %w", key.Name, err)
		}
		if ref := auditpolicy.ControllerOf(obj); ref == nil || ref.Name != name || (uid != "" && ref.UID != uid) {
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Removing admission policy", "kind", fmt.Sprintf("%T", obj), "name", key.Name)
		if err := r.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s: %w", key.Name, err)
		}
	}
	return nil
}

// warn records the Warning Events of an AuditPolicy that does not compile, or whose paramRef finds no param
// or reads params that are never read; it returns the note of a missing param ("" when its params are found
// or not known).
func (r *auditPolicyReconciler) warn(ap *v1alpha1.AuditPolicy, key audit.PolicyKey, problems []string) string {
	if len(problems) > 0 {
		r.Warnings.warn(ap, kindAuditPolicy, "", ReasonCompileFailed, "Compile",
			"The policy does not compile, so it is not audited: "+strings.Join(problems, "; "))
		return ""
	}
	st := r.Policies.lookup(key)
	if st == nil || st.rejected {
		return ""
	}
	binding := auditpolicy.ToAdmission(ap, r.Exemptions).Binding
	reason, note := paramProblem(binding, paramKind(st.paramKinds), st.resolver, r.Policies.Params)
	if reason != "" {
		r.Warnings.warn(ap, kindAuditPolicy, "", reason, "Bind", note)
	}
	r.Warnings.paramsNotRead(ap, kindAuditPolicy, r.Policies.Params, paramKind(st.paramKinds), len(paramRefs([]admissionregistrationv1.ValidatingAdmissionPolicyBinding{*binding})))
	return note
}

// writeStatus writes ap's status when it changed.
func (r *auditPolicyReconciler) writeStatus(ctx context.Context, ap *v1alpha1.AuditPolicy, o auditPolicyObservation) error {
	want := desiredStatus(ap, o, r.Clock.Now())
	if equality.Semantic.DeepEqual(ap.Status, want) {
		return nil
	}
	// An update, not a merge patch: a patch would leave out the counts that stay 0, and the printer columns
	// would show them blank. The resource version makes it fail rather than overwrite a newer status.
	ap.Status = want
	if err := r.Client.Status().Update(ctx, ap); err != nil {
		return fmt.Errorf("writing the status of AuditPolicy %s: %w", ap.Name, err)
	}
	return nil
}

// promote moves ap's enforcement forward when its promotion is due; it returns how long until it may be.
func (r *auditPolicyReconciler) promote(ctx context.Context, ap *v1alpha1.AuditPolicy) (time.Duration, error) {
	to, wait := promotionDue(ap, r.Clock.Now())
	if to == "" {
		return wait, nil
	}
	from := ap.EnforcementOrDefault()
	before := ap.DeepCopy()
	ap.Spec.Enforcement = to
	if err := r.Client.Patch(ctx, ap, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		r.Events.Eventf(ap, nil, corev1.EventTypeWarning, ReasonPromotionFailed, "Promote",
			"Moving enforcement from %s to %s failed: %v", from, to, err)
		return 0, fmt.Errorf("promoting AuditPolicy %s to %s: %w", ap.Name, to, err)
	}
	r.Events.Eventf(ap, nil, corev1.EventTypeNormal, ReasonPromoted, "Promote",
		"Enforcement moved from %s to %s: SafeToEnforce held for %s", from, to, ap.Spec.Promotion.For.Duration)
	return 0, nil
}

// summariesChanged enqueues the AuditPolicies among keys, whose summaries changed. Before the controller
// starts there is nothing to enqueue: every AuditPolicy is reconciled once it does.
func (r *auditPolicyReconciler) summariesChanged(keys []audit.PolicyKey) {
	q := r.queue.Load()
	if q == nil {
		return
	}
	for _, k := range keys {
		if k.Source == audit.SourceAuditPolicy {
			(*q).Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: k.Name}})
		}
	}
}

func (r *auditPolicyReconciler) markRegistered(name string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.registered[name] = at
}

// auditedSince reports whether the last complete audit (if done, taken at at) describes the AuditPolicy as
// last registered; when it does not, and the policy is audited at all, its status waits for the next one.
func (r *auditPolicyReconciler) auditedSince(name string, done bool, at time.Time, audited bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	complete := done && !at.Before(r.registered[name])
	if !complete && audited {
		r.pending[name] = true
	} else {
		delete(r.pending, name)
	}
	return complete
}

// auditCompleted enqueues the AuditPolicies waiting for a complete audit.
func (r *auditPolicyReconciler) auditCompleted() {
	q := r.queue.Load()
	if q == nil {
		return
	}
	r.mu.Lock()
	names := make([]string, 0, len(r.pending))
	for name := range r.pending {
		names = append(names, name)
	}
	r.mu.Unlock()
	for _, name := range names {
		(*q).Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
}

// discoveryChanged asks for every AuditPolicy to be bound again.
func (r *auditPolicyReconciler) discoveryChanged() {
	select {
	case r.rebind <- struct{}{}:
	default:
	}
}

// enqueueAllOnRebind enqueues every AuditPolicy after each discovery change.
func (r *auditPolicyReconciler) enqueueAllOnRebind(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.rebind:
		}
		list := &v1alpha1.AuditPolicyList{}
		if err := r.Client.List(ctx, list); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing AuditPolicies to bind again failed")
			continue
		}
		for _, ap := range list.Items {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: ap.Name}})
		}
	}
}

// listAtStartup tells the start-up gate which AuditPolicies the synced cache holds.
func (r *auditPolicyReconciler) listAtStartup(ctx context.Context) error {
	return r.Startup.ListFrom(ctx, r.Client, audit.SourceAuditPolicy, &v1alpha1.AuditPolicyList{})
}

// deletionStarted passes the update that marks an object for deletion: its finalizers are then due.
func deletionStarted() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// SetupWithManager registers the reconciler with mgr. It reacts to spec and annotation changes of
// AuditPolicies and to their deletion (not to its own status and finalizer writes), to changes of the pairs it registered, to discovery changes
// and to changes of their summaries.
func (r *auditPolicyReconciler) SetupWithManager(mgr ctrl.Manager, opts ...func(*ctrl.Builder) *ctrl.Builder) error {
	if r.Client == nil || r.Policies == nil || r.Summaries == nil || r.Recheck == nil || r.Events == nil || r.Warnings == nil || r.Startup == nil || r.Discovery == nil || r.Failures == nil {
		return fmt.Errorf("auditPolicyReconciler needs Client, Policies, Summaries, Recheck, Events, Warnings, Startup, Discovery and Failures")
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.rebind = make(chan struct{}, 1)
	r.registered = map[string]time.Time{}
	r.pending = map[string]bool{}
	r.Discovery.OnChange(r.discoveryChanged)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return ctx.Err()
		}
		return r.listAtStartup(ctx)
	})); err != nil {
		return fmt.Errorf("adding AuditPolicy start-up listing: %w", err)
	}
	bo := newBackingOff(r, r.Failures, "AuditPolicies")
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.AuditPolicy{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, deletionStarted()))).
		Named("auditpolicy").
		Owns(&admissionregistrationv1.ValidatingAdmissionPolicy{}).
		Owns(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}).
		WatchesRawSource(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			r.queue.Store(&q)
			go r.enqueueAllOnRebind(ctx, q)
			return nil
		})).
		WatchesRawSource(bo.Source())
	if r.Rollups != nil {
		r.watchShards(b)
	}
	for _, o := range opts {
		b = o(b)
	}
	return b.Complete(bo)
}

// watchShards has the leader reconcile the AuditPolicies an AuditShard names whenever it changes, and every
// AuditPolicy whenever the layout changes (setupShards adds the reconcile of every AuditPolicy once it is
// elected: as a member it only published its share of them).
func (r *auditPolicyReconciler) watchShards(b *builder.TypedBuilder[reconcile.Request]) {
	r.Rollups.Source.Subscribe(func(shard.Layout) { r.discoveryChanged() })
	b.Watches(&v1alpha1.AuditShard{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if !r.leads() {
			return nil
		}
		s := o.(*v1alpha1.AuditShard)
		reqs := make([]reconcile.Request, 0, len(s.Status.Policies))
		for _, p := range s.Status.Policies {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
		return reqs
	}))
}
