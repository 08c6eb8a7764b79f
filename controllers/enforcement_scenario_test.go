package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// startShipped runs celaudit as its shipped ServiceAccount, managing admission policies.
func startShipped(t *testing.T) func() {
	t.Helper()
	id := env.ShippedIdentity(t)
	_, stop := envtestutil.StartOperator(t, id.Config, auditPolicyOptions())
	return stop
}

// safeToEnforceIs checks SafeToEnforce of the current generation.
func safeToEnforceIs(status metav1.ConditionStatus, reason string) func(*v1alpha1.AuditPolicy) error {
	return func(ap *v1alpha1.AuditPolicy) error {
		c := condition(ap, v1alpha1.ConditionSafeToEnforce)
		if c.ObservedGeneration != ap.Generation || c.Status != status || c.Reason != reason {
			return fmt.Errorf("SafeToEnforce of generation %d = %+v, want %s %s", ap.Generation, c, status, reason)
		}
		return nil
	}
}

// enforcedIs checks the Enforced condition of the current generation, whose message must contain says.
func enforcedIs(status metav1.ConditionStatus, reason string, says ...string) func(*v1alpha1.AuditPolicy) error {
	return func(ap *v1alpha1.AuditPolicy) error {
		c := condition(ap, v1alpha1.ConditionEnforced)
		if c.ObservedGeneration != ap.Generation || c.Status != status || c.Reason != reason {
			return fmt.Errorf("Enforced of generation %d = %+v, want %s %s", ap.Generation, c, status, reason)
		}
		for _, s := range says {
			if !strings.Contains(c.Message, s) {
				return fmt.Errorf("Enforced message %q lacks %q", c.Message, s)
			}
		}
		return nil
	}
}

// both checks all of checks.
func both(checks ...func(*v1alpha1.AuditPolicy) error) func(*v1alpha1.AuditPolicy) error {
	return func(ap *v1alpha1.AuditPolicy) error {
		for _, c := range checks {
			if err := c(ap); err != nil {
				return err
			}
		}
		return nil
	}
}

// pairExists reports which of the ValidatingAdmissionPolicy and binding celaudit-<name> exist, whatever their
// labels.
func pairExists(t *testing.T, name string) (policy, binding bool) {
	t.Helper()
	key := client.ObjectKey{Name: "celaudit-" + name}
	exists := func(obj client.Object) bool {
		err := env.Client.Get(context.Background(), key, obj)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("getting %s: %v", key.Name, err)
		}
		return err == nil
	}
	return exists(&admissionregistrationv1.ValidatingAdmissionPolicy{}), exists(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{})
}

// TestPromotionNeedsJudgedObjects: a policy on a subresource (which no stored object stands for) and one whose
// every result is a skip (it reads request.userInfo) judge nothing, so their SafeToEnforce is Unknown and they
// are never promoted, however short their window; a clean policy over stored objects in the same run is.
func TestPromotionNeedsJudgedObjects(t *testing.T) {
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "pnj-a", Labels: map[string]string{"pnj": "yes"}}},
		configMap("pnj-a", "ok", map[string]string{"owner": "team-a"}),
		configMap("pnj-a", "ok2", map[string]string{"owner": "team-b"}))
	for _, n := range []string{"pnj-clean", "pnj-scale", "pnj-user"} {
		deleteAuditPolicyAfter(t, n)
	}
	startShipped(t)

	// The unsafe policies' window is shorter: were they taken for safe, they would be promoted first.
	clean := ownerAuditPolicy("pnj-clean", "pnj", "owner required")
	clean.Spec.Promotion = &v1alpha1.Promotion{To: v1alpha1.Deny, For: metav1.Duration{Duration: 2 * time.Second}}
	scale := &v1alpha1.AuditPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "pnj-scale"},
		Spec: v1alpha1.AuditPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments/scale"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= 5", Message: "at most 5 replicas"}},
			Promotion:   &v1alpha1.Promotion{To: v1alpha1.Deny, For: metav1.Duration{Duration: time.Second}},
		},
	}
	user := ownerAuditPolicy("pnj-user", "pnj", "mallory may not write ConfigMaps")
	user.Spec.Validations[0].Expression = "request.userInfo.username != 'mallory'"
	user.Spec.Promotion = &v1alpha1.Promotion{To: v1alpha1.Deny, For: metav1.Duration{Duration: time.Second}}
	create(t, clean, scale, user)

	// The promotion machinery runs: the clean policy is promoted, and registered once its new generation
	// is judged clean too.
	expectAuditPolicy(t, "pnj-clean", func(ap *v1alpha1.AuditPolicy) error {
		if ap.Spec.Enforcement != v1alpha1.Deny {
			return fmt.Errorf("enforcement %s", ap.Spec.Enforcement)
		}
		return both(safeToEnforceIs(metav1.ConditionTrue, "NoViolations"), enforcedIs(metav1.ConditionTrue, controllers.ReasonRegistered))(ap)
	})
	expectRegistered(t, "pnj-clean", true)

	// The others are Unknown, with the reason, and have been for longer than their window.
	for _, tc := range []struct{ name, reason, says string }{
		{"pnj-scale", "Subresources", "(deployments/scale)"},
		{"pnj-user", "Skipped", "2 results are skips"},
	} {
		ap := expectAuditPolicy(t, tc.name, func(ap *v1alpha1.AuditPolicy) error {
			if err := safeToEnforceIs(metav1.ConditionUnknown, tc.reason)(ap); err != nil {
				return err
			}
			if c := condition(ap, v1alpha1.ConditionSafeToEnforce); time.Since(c.LastTransitionTime.Time) < 2*time.Second {
				return fmt.Errorf("SafeToEnforce of %s is Unknown since %s only", tc.name, c.LastTransitionTime)
			}
			return nil
		})
		if c := condition(ap, v1alpha1.ConditionSafeToEnforce); !strings.Contains(c.Message, tc.says) {
			t.Errorf("SafeToEnforce message of %s %q lacks %q", tc.name, c.Message, tc.says)
		}
		if ap.Spec.Enforcement != v1alpha1.Audit {
			t.Errorf("%s was promoted to %s with SafeToEnforce %s", tc.name, ap.Spec.Enforcement, condition(ap, v1alpha1.ConditionSafeToEnforce).Reason)
		}
		if p, b := pairExists(t, tc.name); p || b {
			t.Errorf("something is registered for %s: policy %v, binding %v", tc.name, p, b)
		}
	}
}

// TestHandSetDenyWithMissingParams: a policy whose paramRef finds no param (parameterNotFoundAction Deny) makes
// the API server deny every write it matches, whatever its validationActions. Set to Deny or Warn by hand it is
// not registered; with an override it is, the override is recorded, and the way back (Audit, then a delete)
// always works and removes the pair.
func TestHandSetDenyWithMissingParams(t *testing.T) {
	ctx := context.Background()
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hsd-a", Labels: map[string]string{"hsd": "yes"}}},
		configMap("hsd-a", "big", map[string]string{"a": "1", "b": "2", "c": "3"}))
	deleteAuditPolicyAfter(t, "hsd-size")
	startShipped(t)

	ap := ownerAuditPolicy("hsd-size", "hsd", "too many keys")
	ap.Spec.Validations[0].Expression = "!has(object.data) || size(object.data) <= int(params.data.max)"
	ap.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	ap.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "hsd-limits", Namespace: "hsd-a",
		ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
	ap.Spec.Enforcement = v1alpha1.Deny
	create(t, ap)

	// Deny by hand: judged (the error result), not registered.
	expectAuditPolicy(t, "hsd-size", both(statusIs(1, 0, 0, 0, 1, metav1.ConditionFalse),
		enforcedIs(metav1.ConditionFalse, controllers.ReasonNotSafeToEnforce, "finds no param", "nothing is registered", "spec.enforcementOverride.reason")))
	if p, b := pairExists(t, "hsd-size"); p || b {
		t.Fatalf("a Deny policy whose param is missing is registered: policy %v, binding %v", p, b)
	}

	// Warn would deny every matched write just the same: refused too.
	update(t, ap, func(ap *v1alpha1.AuditPolicy) { ap.Spec.Enforcement = v1alpha1.Warn })
	expectAuditPolicy(t, "hsd-size", both(statusIs(1, 0, 0, 0, 1, metav1.ConditionFalse),
		enforcedIs(metav1.ConditionFalse, controllers.ReasonNotSafeToEnforce, "configuration error", "finds no param")))
	if p, b := pairExists(t, "hsd-size"); p || b {
		t.Fatalf("a Warn policy whose param is missing is registered: policy %v, binding %v", p, b)
	}

	// Overridden: registered, said so, recorded; the API server then denies a matched write for the missing
	// param.
	const why = "incident 7: the limits ConfigMap is on its way"
	update(t, ap, func(ap *v1alpha1.AuditPolicy) {
		ap.Spec.Enforcement = v1alpha1.Deny
		ap.Spec.EnforcementOverride = &v1alpha1.EnforcementOverride{Reason: why}
	})
	expectRegistered(t, "hsd-size", true)
	expectAuditPolicy(t, "hsd-size", enforcedIs(metav1.ConditionTrue, controllers.ReasonRegisteredWithOverride, why, "validationActions [Deny]"))
	expectEvent(t, "hsd-size", corev1.EventTypeWarning, controllers.ReasonRegisteredWithOverride, why)
	envtestutil.Eventually(t, 20*time.Second, func() error {
		n, msgs := apiserverRejects(t, configMap("hsd-a", "small", map[string]string{"a": "1"}))
		if n != 1 || !strings.Contains(msgs[0], "no params found") {
			return fmt.Errorf("the API server rejects %d matched writes (%q), want 1 for the missing params", n, msgs)
		}
		return nil
	})

	// The way back: a merge patch to Audit is admitted and the pair goes, and the finalizer with it.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"enforcement":"Audit"}}`))
	if err := env.Client.Patch(ctx, &v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: "hsd-size"}}, patch); err != nil {
		t.Fatalf("patching the enforcement back to Audit: %v", err)
	}
	expectRegistered(t, "hsd-size", false)
	expectAuditPolicy(t, "hsd-size", func(ap *v1alpha1.AuditPolicy) error {
		if len(ap.Finalizers) != 0 {
			return fmt.Errorf("finalizers %v on an Audit policy", ap.Finalizers)
		}
		return enforcedIs(metav1.ConditionFalse, controllers.ReasonAuditOnly)(ap)
	})

	// And a delete: admitted, the pair goes, then the AuditPolicy.
	patch = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"enforcement":"Deny"}}`))
	if err := env.Client.Patch(ctx, &v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: "hsd-size"}}, patch); err != nil {
		t.Fatal(err)
	}
	expectRegistered(t, "hsd-size", true)
	if err := env.Client.Delete(ctx, &v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: "hsd-size"}}); err != nil {
		t.Fatalf("deleting the AuditPolicy: %v", err)
	}
	expectRegistered(t, "hsd-size", false)
	envtestutil.Eventually(t, 20*time.Second, func() error {
		err := env.Client.Get(ctx, client.ObjectKey{Name: "hsd-size"}, &v1alpha1.AuditPolicy{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the deleted AuditPolicy is still there: %w", err)
		}
		return nil
	})
}

// TestOwnershipByControllerReference: celaudit owns the pairs whose controller ownerReference names an
// AuditPolicy by uid, and nothing else. A VAP that claims an AuditPolicy by a label is audited like any VAP;
// removing the label from a registered pair changes nothing; and an AuditPolicy deleted while celaudit is down
// waits, Terminating, until celaudit removes its pair.
func TestOwnershipByControllerReference(t *testing.T) {
	ctx := context.Background()
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "own-a", Labels: map[string]string{"own": "yes"}}},
		configMap("own-a", "ok", map[string]string{"owner": "team-a", "team": "a"}),
		configMap("own-a", "bad", map[string]string{"owner": "team-a"}))
	foreign, binding := boundPolicy("own-foreign", "has(object.data) && 'team' in object.data", "a team is required",
		configMapRule(), []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("own")})
	foreign.Labels = map[string]string{"audit.celaudit.io/auditpolicy": "nobody"}
	binding.Labels = map[string]string{"audit.celaudit.io/auditpolicy": "nobody"}
	create(t, foreign, binding)
	deleteAfter(t, binding, foreign)
	deleteAuditPolicyAfter(t, "own-pair")
	stop := startShipped(t)

	// The labelled foreign VAP is audited as itself; the AuditPolicy is registered for Warn.
	pair := ownerAuditPolicy("own-pair", "own", "an owner is required")
	pair.Spec.Validations[0].Expression = "has(object.data) && 'owner' in object.data && object.data.owner != 'team-a'"
	pair.Spec.Enforcement = v1alpha1.Warn
	create(t, pair)
	expectRegistered(t, "own-pair", true)
	expectReportContains(t, "own-a", "fail bad: a team is required", "warn bad: an owner is required", "warn ok: an owner is required")

	// The label is removed from the registered pair: still celaudit's, not audited as a VAP of its own.
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "celaudit-own-pair"}}
	update(t, vap, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		delete(p.Labels, "audit.celaudit.io/auditpolicy")
	})
	// A new object's results show that the audit went on after the change: by then a VAP audited as itself
	// would have added its own results (a second warn of each object).
	create(t, configMap("own-a", "new", map[string]string{"owner": "team-a", "team": "b"}))
	expectReportContains(t, "own-a", "fail bad: a team is required",
		"warn bad: an owner is required", "warn ok: an owner is required", "warn new: an owner is required")
	expectAuditPolicy(t, "own-pair", enforcedIs(metav1.ConditionTrue, controllers.ReasonRegistered))
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vap), vap); err != nil || vap.Labels["audit.celaudit.io/auditpolicy"] != "" {
		t.Fatalf("the unlabelled pair: %v, labels %v", err, vap.Labels)
	}

	// Deleted while celaudit is down: the finalizer keeps the AuditPolicy, and its pair, until celaudit is back.
	stop()
	if err := env.Client.Delete(ctx, &v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: "own-pair"}}); err != nil {
		t.Fatal(err)
	}
	terminating := &v1alpha1.AuditPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "own-pair"}, terminating); err != nil || terminating.DeletionTimestamp.IsZero() ||
		!slices.Contains(terminating.Finalizers, v1alpha1.FinalizerAdmissionPolicy) {
		t.Fatalf("the AuditPolicy deleted while celaudit is down: %v, %+v", err, terminating.ObjectMeta)
	}
	if p, b := pairExists(t, "own-pair"); !p || !b {
		t.Fatalf("the pair went before celaudit was back: policy %v, binding %v", p, b)
	}
	startShipped(t)
	envtestutil.Eventually(t, 30*time.Second, func() error {
		if p, b := pairExists(t, "own-pair"); p || b {
			return fmt.Errorf("the pair of the deleted AuditPolicy remains: policy %v, binding %v", p, b)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "own-pair"}, &v1alpha1.AuditPolicy{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the AuditPolicy remains: %w", err)
		}
		return nil
	})
	// The foreign VAP and binding are not celaudit's: they stay, audited.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), foreign); err != nil {
		t.Errorf("the foreign VAP: %v", err)
	}
	expectReportContains(t, "own-a", "fail bad: a team is required")
}

// TestAuditPolicyNameLength: the name is the value of the label on the registered pair, at most 63
// characters; the CRD refuses a longer one, and a name of 63 is registered.
func TestAuditPolicyNameLength(t *testing.T) {
	long := "anl-" + strings.Repeat("x", 60) // 64
	if err := env.Client.Create(context.Background(), ownerAuditPolicy(long, "anl", "m"), client.DryRunAll); err == nil ||
		!strings.Contains(err.Error(), "at most 63 characters") {
		t.Fatalf("creating an AuditPolicy named with 64 characters: %v, want the CRD to refuse it", err)
	}
	name := long[:63]
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "anl-a", Labels: map[string]string{"anl": "yes"}}},
		configMap("anl-a", "ok", map[string]string{"owner": "team-a"}))
	deleteAuditPolicyAfter(t, name)
	startShipped(t)
	ap := ownerAuditPolicy(name, "anl", "owner required")
	ap.Spec.Enforcement = v1alpha1.Warn
	create(t, ap)
	expectRegistered(t, name, true)
	expectAuditPolicy(t, name, enforcedIs(metav1.ConditionTrue, controllers.ReasonRegistered))
}
