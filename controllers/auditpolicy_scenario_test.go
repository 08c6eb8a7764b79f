package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// auditPolicyOptions are the operator's options for AuditPolicy tests: admission policies managed, and
// readiness recomputed quickly.
func auditPolicyOptions() controllers.Options {
	o := envtestutil.TestOptions()
	o.ManageAdmissionPolicies = true
	o.ReadinessInterval = 200 * time.Millisecond
	return o
}

// ownerAuditPolicy returns an AuditPolicy requiring an owner key in the ConfigMaps of namespaces labelled
// label=yes.
func ownerAuditPolicy(name, label, message string) *v1alpha1.AuditPolicy {
	return &v1alpha1.AuditPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.AuditPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configMapRule()}},
			Validations:      []admissionregistrationv1.Validation{{Expression: "has(object.data) && 'owner' in object.data", Message: message}},
			MatchResources:   &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)},
			Category:         "Ownership",
			Severity:         "high",
		},
	}
}

// deleteAuditPolicyAfter deletes the AuditPolicy and what may have been registered for it when the test ends,
// and its finalizer: the test's celaudit is stopped by then.
func deleteAuditPolicyAfter(t *testing.T, name string) {
	admission := "celaudit-" + name
	deleteAfter(t, &v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: admission}},
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: admission}})
	t.Cleanup(func() {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		_ = client.IgnoreNotFound(env.Client.Patch(context.Background(), &v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}, patch))
	})
}

// expectAuditPolicy waits until the AuditPolicy's status passes check.
func expectAuditPolicy(t *testing.T, name string, check func(*v1alpha1.AuditPolicy) error) *v1alpha1.AuditPolicy {
	t.Helper()
	ap := &v1alpha1.AuditPolicy{}
	envtestutil.Eventually(t, 30*time.Second, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, ap); err != nil {
			return err
		}
		return check(ap)
	})
	return ap
}

// statusIs checks the counts and the SafeToEnforce condition of the current generation.
func statusIs(matched, pass, fail, warn, errs int64, safe metav1.ConditionStatus) func(*v1alpha1.AuditPolicy) error {
	return func(ap *v1alpha1.AuditPolicy) error {
		s := ap.Status
		c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionSafeToEnforce)
		if s.ObservedGeneration != ap.Generation || c == nil || c.Status != safe || c.ObservedGeneration != ap.Generation ||
			s.Matched != matched || s.Pass != pass || s.Fail != fail || s.Warn != warn || s.Error != errs || s.Violations != fail+warn {
			return fmt.Errorf("status of generation %d: %+v", ap.Generation, s)
		}
		return nil
	}
}

func condition(ap *v1alpha1.AuditPolicy, t string) metav1.Condition {
	if c := meta.FindStatusCondition(ap.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// expectEvent waits for an Event of reason on the AuditPolicy whose note contains note.
func expectEvent(t *testing.T, name, eventType, reason, note string) {
	t.Helper()
	envtestutil.Eventually(t, 20*time.Second, func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace("default")); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "AuditPolicy" && e.Regarding.Name == name && e.Type == eventType && e.Reason == reason &&
				strings.Contains(e.Note, note) {
				return nil
			}
		}
		return fmt.Errorf("no %s Event %s on AuditPolicy %s with %q", eventType, reason, name, note)
	})
}

func registered(name string) (bool, error) {
	ctx := context.Background()
	key := client.ObjectKey{Name: "celaudit-" + name}
	var n int
	for _, obj := range []client.Object{&admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}} {
		err := env.Client.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, err
		}
		if obj.GetLabels()["audit.celaudit.io/auditpolicy"] != name || len(obj.GetOwnerReferences()) != 1 || obj.GetOwnerReferences()[0].Name != name {
			return false, fmt.Errorf("%T %s lacks the AuditPolicy's label or owner: %v %v", obj, key.Name, obj.GetLabels(), obj.GetOwnerReferences())
		}
		n++
	}
	if n == 1 {
		return false, fmt.Errorf("only one of the policy and binding %s exists", key.Name)
	}
	return n == 2, nil
}

func expectRegistered(t *testing.T, name string, want bool) {
	t.Helper()
	envtestutil.Eventually(t, 20*time.Second, func() error {
		got, err := registered(name)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("admission policy of %s registered: %v, want %v", name, got, want)
		}
		return nil
	})
}

// apiserverRejects returns how many of objs a server-side dry-run create rejects, with the messages. It asks
// as a user of its own: the operator of these tests runs as the test's admin, whose requests are exempt.
func apiserverRejects(t *testing.T, objs ...*corev1.ConfigMap) (int, []string) {
	t.Helper()
	writer := impersonating(t, "apiserver-rejects-probe")
	n, msgs := 0, []string{}
	for _, o := range objs {
		probe := configMap(o.Namespace, o.Name+"-probe", o.Data)
		err := writer.Create(context.Background(), probe, client.DryRunAll)
		switch {
		case err == nil:
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
			n++
			msgs = append(msgs, err.Error())
		default:
			t.Fatalf("dry-run create of %s: %v", probe.Name, err)
		}
	}
	return n, msgs
}

func TestAuditPolicyLifecycleScenario(t *testing.T) {
	ctx := context.Background()
	const msg = "configmaps must name an owner"
	ok := configMap("apl-a", "ok", map[string]string{"owner": "team-a"})
	bad1 := configMap("apl-a", "bad1", map[string]string{"size": "3"})
	bad2 := configMap("apl-a", "bad2", nil)
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apl-a", Labels: map[string]string{"apl": "yes"}}}, ok, bad1, bad2)
	deleteAuditPolicyAfter(t, "apl-owner")
	_, _ = envtestutil.StartOperator(t, env.Config, auditPolicyOptions())

	// Audit: celaudit evaluates the policy alone; violations are warnings under the AuditPolicy's name.
	create(t, ownerAuditPolicy("apl-owner", "apl", msg))
	expectReport(t, "apl-a", 1, "warn bad1: "+msg, "warn bad2: "+msg)
	ap := expectAuditPolicy(t, "apl-owner", statusIs(3, 1, 0, 2, 0, metav1.ConditionFalse))
	if c := condition(ap, v1alpha1.ConditionSafeToEnforce); !strings.Contains(c.Message, "2 of 3 matched objects") {
		t.Errorf("SafeToEnforce message %q does not count the violating objects", c.Message)
	}
	if c := condition(ap, v1alpha1.ConditionCompiled); c.Status != metav1.ConditionTrue {
		t.Errorf("Compiled = %+v", c)
	}
	if c := condition(ap, v1alpha1.ConditionEnforced); c.Status != metav1.ConditionFalse || c.Reason != controllers.ReasonAuditOnly {
		t.Errorf("Enforced = %+v", c)
	}
	if len(ap.Status.TopNamespaces) != 1 || ap.Status.TopNamespaces[0] != (v1alpha1.NamespaceViolations{Namespace: "apl-a", Violations: 2}) ||
		ap.Status.LastAuditTime == nil {
		t.Errorf("top namespaces %+v, last audit %v", ap.Status.TopNamespaces, ap.Status.LastAuditTime)
	}
	if got, err := registered("apl-owner"); err != nil || got {
		t.Fatalf("an Audit policy is registered with the API server: %v %v", got, err)
	}
	// Its readiness is told on the AuditPolicy, as on a ValidatingAdmissionPolicy or a CRD.
	expectEvent(t, "apl-owner", corev1.EventTypeWarning, "NotSafeToEnforce", "2 of 3 matched objects violate the policy")

	// Deny by hand, with violations: judged again (the violations are now fail results) and not registered.
	update(t, ap, func(ap *v1alpha1.AuditPolicy) { ap.Spec.Enforcement = v1alpha1.Deny })
	expectReport(t, "apl-a", 1, "fail bad1: "+msg, "fail bad2: "+msg)
	ap = expectAuditPolicy(t, "apl-owner", both(statusIs(3, 1, 2, 0, 0, metav1.ConditionFalse),
		enforcedIs(metav1.ConditionFalse, controllers.ReasonNotSafeToEnforce, "SafeToEnforce is False", "nothing is registered")))
	if got, err := registered("apl-owner"); err != nil || got {
		t.Fatalf("a Deny policy with violations is registered: %v %v", got, err)
	}

	// Deny with an override: the pair is registered, the API server rejects exactly the objects the status
	// counts, with the message of the report, and the report lists each violation once, as fail.
	update(t, ap, func(ap *v1alpha1.AuditPolicy) {
		ap.Spec.EnforcementOverride = &v1alpha1.EnforcementOverride{Reason: "the violations are known"}
	})
	expectRegistered(t, "apl-owner", true)
	expectReport(t, "apl-a", 1, "fail bad1: "+msg, "fail bad2: "+msg)
	ap = expectAuditPolicy(t, "apl-owner", statusIs(3, 1, 2, 0, 0, metav1.ConditionFalse))
	if c := condition(ap, v1alpha1.ConditionEnforced); c.Status != metav1.ConditionTrue || c.Reason != controllers.ReasonRegisteredWithOverride ||
		ap.Status.AdmissionPolicy != "celaudit-apl-owner" {
		t.Errorf("Enforced = %+v, admission policy %q", c, ap.Status.AdmissionPolicy)
	}
	envtestutil.Eventually(t, 20*time.Second, func() error {
		n, msgs := apiserverRejects(t, ok, bad1, bad2)
		if int64(n) != ap.Status.Fail {
			return fmt.Errorf("the API server rejects %d of the stored objects (%q), the status counts %d", n, msgs, ap.Status.Fail)
		}
		for _, m := range msgs {
			if !strings.Contains(m, "denied request: "+msg) {
				return fmt.Errorf("API server message %q is not the report's %q", m, msg)
			}
		}
		return nil
	})

	// The objects are fixed: safe to enforce.
	for _, o := range []*corev1.ConfigMap{bad1, bad2} {
		update(t, o, func(c *corev1.ConfigMap) { c.Data = map[string]string{"owner": "team-b"} })
	}
	expectReport(t, "apl-a", 3)
	ap = expectAuditPolicy(t, "apl-owner", statusIs(3, 3, 0, 0, 0, metav1.ConditionTrue))
	if c := condition(ap, v1alpha1.ConditionSafeToEnforce); !strings.Contains(c.Message, "3 matched objects") {
		t.Errorf("SafeToEnforce message %q", c.Message)
	}
	expectEvent(t, "apl-owner", corev1.EventTypeNormal, "SafeToEnforce", "0 of 3 matched objects violate the policy")

	// A broken expression: Compiled=False with the compiler's message, an Event, no results; the
	// registered pair stays as it was.
	update(t, ap, func(ap *v1alpha1.AuditPolicy) { ap.Spec.Validations[0].Expression = "nosuch.owner == 'x'" })
	ap = expectAuditPolicy(t, "apl-owner", func(ap *v1alpha1.AuditPolicy) error {
		c := condition(ap, v1alpha1.ConditionCompiled)
		if c.Status != metav1.ConditionFalse || c.ObservedGeneration != ap.Generation || !strings.Contains(c.Message, "undeclared reference to 'nosuch'") {
			return fmt.Errorf("Compiled = %+v", c)
		}
		return nil
	})
	expectEvent(t, "apl-owner", corev1.EventTypeWarning, controllers.ReasonCompileFailed, "undeclared reference to 'nosuch'")
	expectReport(t, "apl-a", 0)

	// Back to Audit, and a valid expression: the pair is removed.
	update(t, ap, func(ap *v1alpha1.AuditPolicy) {
		ap.Spec.Validations[0].Expression = "has(object.data) && 'owner' in object.data"
		ap.Spec.Enforcement = v1alpha1.Audit
		ap.Spec.EnforcementOverride = nil
	})
	expectRegistered(t, "apl-owner", false)
	expectReport(t, "apl-a", 3)

	// Deny again, now safe: registered without an override once judged; then delete the AuditPolicy: its
	// results and its pair are gone.
	update(t, ap, func(ap *v1alpha1.AuditPolicy) { ap.Spec.Enforcement = v1alpha1.Deny })
	expectRegistered(t, "apl-owner", true)
	expectAuditPolicy(t, "apl-owner", enforcedIs(metav1.ConditionTrue, controllers.ReasonRegistered))
	if err := env.Client.Delete(ctx, ap); err != nil {
		t.Fatal(err)
	}
	expectRegistered(t, "apl-owner", false)
	expectReport(t, "apl-a", 0)
}

func TestAuditPolicyPromotion(t *testing.T) {
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app-a", Labels: map[string]string{"app-clean": "yes"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app-b", Labels: map[string]string{"app-dirty": "yes"}}},
		configMap("app-a", "ok", map[string]string{"owner": "team-a"}),
		configMap("app-b", "bad", map[string]string{"size": "1"}),
	)
	deleteAuditPolicyAfter(t, "app-clean")
	deleteAuditPolicyAfter(t, "app-dirty")
	_, _ = envtestutil.StartOperator(t, env.Config, auditPolicyOptions())

	// The dirty policy's window is shorter: had violations not stopped it, it would be promoted first.
	clean := ownerAuditPolicy("app-clean", "app-clean", "owner required")
	clean.Spec.Promotion = &v1alpha1.Promotion{To: v1alpha1.Warn, For: metav1.Duration{Duration: 3 * time.Second}}
	dirty := ownerAuditPolicy("app-dirty", "app-dirty", "owner required")
	dirty.Spec.Promotion = &v1alpha1.Promotion{To: v1alpha1.Warn, For: metav1.Duration{Duration: time.Second}}
	create(t, clean, dirty)

	expectAuditPolicy(t, "app-dirty", statusIs(1, 0, 0, 1, 0, metav1.ConditionFalse))
	promoted := expectAuditPolicy(t, "app-clean", func(ap *v1alpha1.AuditPolicy) error {
		if ap.Spec.Enforcement != v1alpha1.Warn {
			return fmt.Errorf("enforcement %s", ap.Spec.Enforcement)
		}
		return nil
	})
	expectEvent(t, "app-clean", corev1.EventTypeNormal, controllers.ReasonPromoted, "from Audit to Warn: SafeToEnforce held for 3s")
	expectRegistered(t, "app-clean", true)
	// The promoted generation is judged by its own audit, as Warn now.
	expectAuditPolicy(t, "app-clean", func(ap *v1alpha1.AuditPolicy) error {
		if ap.Generation != promoted.Generation {
			return fmt.Errorf("generation %d changed again after the promotion (%d)", ap.Generation, promoted.Generation)
		}
		return statusIs(1, 1, 0, 0, 0, metav1.ConditionTrue)(ap)
	})

	ap := &v1alpha1.AuditPolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "app-dirty"}, ap); err != nil {
		t.Fatal(err)
	}
	if ap.Spec.Enforcement != v1alpha1.Audit {
		t.Errorf("a policy with violations was promoted to %s", ap.Spec.Enforcement)
	}
}

func TestAuditPolicyValidation(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.AuditPolicy)
		want   string
	}{
		{"paramref-without-paramkind", func(ap *v1alpha1.AuditPolicy) {
			ap.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "x"}
		}, "spec.paramRef requires spec.paramKind"},
		{"no-validations", func(ap *v1alpha1.AuditPolicy) { ap.Spec.Validations = []admissionregistrationv1.Validation{} },
			"spec.validations must hold at least one validation"},
		{"unknown-enforcement", func(ap *v1alpha1.AuditPolicy) { ap.Spec.Enforcement = "Block" }, "enforcement must be Audit, Warn or Deny"},
		{"promotion-backwards", func(ap *v1alpha1.AuditPolicy) {
			ap.Spec.Enforcement = v1alpha1.Deny
			ap.Spec.Promotion = &v1alpha1.Promotion{To: v1alpha1.Warn, For: metav1.Duration{Duration: time.Hour}}
		}, "spec.promotion.to must not come before spec.enforcement"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ap := ownerAuditPolicy("apv-"+tc.name, "apv", "m")
			tc.mutate(ap)
			err := env.Client.Create(ctx, ap, client.DryRunAll)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("create: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	valid := ownerAuditPolicy("apv-valid", "apv", "m")
	if err := env.Client.Create(ctx, valid, client.DryRunAll); err != nil {
		t.Fatalf("a valid AuditPolicy is rejected: %v", err)
	}
	if valid.Spec.Enforcement != v1alpha1.Audit {
		t.Errorf("enforcement defaults to %q", valid.Spec.Enforcement)
	}

	// The sample users start from is accepted as written.
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "samples", "auditpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sample := &v1alpha1.AuditPolicy{}
	if err := yaml.UnmarshalStrict(data, sample); err != nil {
		t.Fatalf("config/samples/auditpolicy.yaml: %v", err)
	}
	if err := env.Client.Create(ctx, sample, client.DryRunAll); err != nil {
		t.Errorf("the API server rejects config/samples/auditpolicy.yaml: %v", err)
	}
}

func TestAuditPolicyMissingParams(t *testing.T) {
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apm-a", Labels: map[string]string{"apm": "yes"}}},
		configMap("apm-a", "big", map[string]string{"a": "1", "b": "2", "c": "3"}))
	deleteAuditPolicyAfter(t, "apm-size")
	_, _ = envtestutil.StartOperator(t, env.Config, auditPolicyOptions())

	ap := ownerAuditPolicy("apm-size", "apm", "too many keys")
	ap.Spec.Validations[0].Expression = "!has(object.data) || size(object.data) <= int(params.data.max)"
	ap.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	ap.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "apm-limits", Namespace: "apm-a",
		ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
	create(t, ap)

	// The param is missing: a Warning Event on the AuditPolicy, where users look, and error results.
	expectEvent(t, "apm-size", corev1.EventTypeWarning, controllers.ReasonParamsNotFound, "no v1 ConfigMap named apm-limits exists in namespace apm-a")
	expectAuditPolicy(t, "apm-size", statusIs(1, 0, 0, 0, 1, metav1.ConditionFalse))

	// The param appears: the policy judges the objects, the param among them.
	create(t, configMap("apm-a", "apm-limits", map[string]string{"max": "2"}))
	expectAuditPolicy(t, "apm-size", statusIs(2, 1, 0, 1, 0, metav1.ConditionFalse))
	expectReportContains(t, "apm-a", "warn big: too many keys")
}

// An AuditPolicy that matches no object is judged too: nothing judged, so not known to be safe. Nothing
// changes in the results, so only its own registration can bring the audit that decides it.
func TestAuditPolicyMatchingNothing(t *testing.T) {
	deleteAuditPolicyAfter(t, "apn-none")
	op, _ := envtestutil.StartOperator(t, env.Config, auditPolicyOptions())
	envtestutil.WaitSettled(t, op)
	create(t, ownerAuditPolicy("apn-none", "apn-no-such-label", "owner required"))
	ap := expectAuditPolicy(t, "apn-none", func(ap *v1alpha1.AuditPolicy) error {
		if err := statusIs(0, 0, 0, 0, 0, metav1.ConditionUnknown)(ap); err != nil {
			return err
		}
		if c := condition(ap, v1alpha1.ConditionSafeToEnforce); c.Reason != "NothingJudged" || ap.Status.LastAuditTime == nil {
			return fmt.Errorf("SafeToEnforce %+v, last audit %v: want the audit's answer, not a pending one", c, ap.Status.LastAuditTime)
		}
		return nil
	})
	if c := condition(ap, v1alpha1.ConditionSafeToEnforce); !strings.Contains(c.Message, "judged no stored object") {
		t.Errorf("SafeToEnforce message %q", c.Message)
	}
}
