package controllers_test

import (
	"context"
	"fmt"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/test/envtestutil"
)

// clusterObjectEvents returns the Events celaudit recorded on the cluster-scoped object kind/name, as
// "type reason: note", followed by " (series of n)" for an Event recorded more than once.
func clusterObjectEvents(ctx context.Context, kind, name string) ([]string, error) {
	list := &eventsv1.EventList{}
	if err := env.Client.List(ctx, list, client.InNamespace(metav1.NamespaceDefault)); err != nil {
		return nil, err
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind != kind || e.Regarding.Name != name || e.ReportingController != "celaudit" {
			continue
		}
		line := fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Note)
		if e.Series != nil {
			line += fmt.Sprintf(" (series of %d)", e.Series.Count)
		}
		out = append(out, line)
	}
	return out, nil
}

// expectEvents waits until the Events celaudit recorded on the cluster-scoped object kind/name are want, in
// any order.
func expectEvents(t *testing.T, kind, name string, want ...string) {
	t.Helper()
	expectStrings(t, "Events on "+kind+" "+name, func(ctx context.Context) ([]string, error) {
		return clusterObjectEvents(ctx, kind, name)
	}, want)
}

// policyNotFound is the Warning Event on a binding of a policy that does not exist.
func policyNotFound(policy string) string {
	return "Warning PolicyNotFound: ValidatingAdmissionPolicy " + policy + " does not exist, so the binding audits nothing"
}

// bindFirst creates binding and waits until the operator has seen it, which its PolicyNotFound Event shows,
// then creates its policy with then: the policy is never audited without its binding (an unbound policy
// is audited on every object its rules match, in every test's namespaces).
func bindFirst(t *testing.T, binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding, then func()) {
	t.Helper()
	create(t, binding)
	expectEvents(t, "ValidatingAdmissionPolicyBinding", binding.Name, policyNotFound(binding.Spec.PolicyName))
	then()
}

// storedPolicy returns a ValidatingAdmissionPolicy on config maps as the API server stores it (defaulted),
// with failurePolicy Ignore, and the given validations.
func storedPolicy(name string, expressions ...string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	rule := coreRule("configmaps")
	rule.Scope = ptr.To(admissionregistrationv1.AllScopes)
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules:     []admissionregistrationv1.NamedRuleWithOperations{rule},
				MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
			},
		},
	}
	for _, e := range expressions {
		p.Spec.Validations = append(p.Spec.Validations, admissionregistrationv1.Validation{Expression: e})
	}
	return p
}

// TestCompileFailedScenario audits a policy the API server accepted under other rules and whose expressions
// this version cannot compile (written to etcd directly, as an older or newer Kubernetes could have stored
// it): its objects get error results, and the policy a CompileFailed Warning Event quoting the compiler as
// the results do, and a NotSafeToEnforce one.
func TestCompileFailedScenario(t *testing.T) {
	ctx := context.Background()
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cf-a", Labels: map[string]string{"cf-audit": "yes"}}},
		configMap("cf-a", "cm", nil),
	)
	_, _ = envtestutil.StartOperator(t, env.Config, envtestutil.TestOptions())
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cf-broken"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "cf-broken",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("cf-audit")},
		},
	}
	bindFirst(t, binding, func() {
		policy := storedPolicy("cf-broken", "object.metadata.name <", "'a' + 1", "true")
		if err := env.StoreUnvalidated(ctx, "validatingadmissionpolicies/cf-broken", policy); err != nil {
			t.Fatal(err)
		}
	})
	deleteAfter(t, binding, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cf-broken"}})

	syntax := "compilation error: compilation failed: ERROR: <input>:1:23: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | object.metadata.name <\n | ......................^"
	types := "compilation error: compilation failed: ERROR: <input>:1:5: found no matching overload for '_+_' applied to '(string, int)'\n | 'a' + 1\n | ....^"
	expectReport(t, "cf-a", 0, "error cm: "+syntax, "error cm: "+types)
	expectEvents(t, "ValidatingAdmissionPolicy", "cf-broken",
		"Warning CompileFailed: Not everything compiles, so the objects it covers get error results: spec.validations[0].expression: "+syntax+
			"; spec.validations[1].expression: "+types,
		// Errors are not violations, but the policy is not safe to enforce.
		"Warning NotSafeToEnforce: 0 of 1 matched objects violate the policy (0 fail, 0 warn, 2 error)")
}

// TestBindingWarningsScenario: a binding of a policy that does not exist, and a binding whose param does not
// exist, each get a Warning Event.
func TestBindingWarningsScenario(t *testing.T) {
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bw-a", Labels: map[string]string{"bw-audit": "yes"}}},
		configMap("bw-a", "cm", map[string]string{"size": "3"}),
	)
	_, _ = envtestutil.StartOperator(t, env.Config, envtestutil.TestOptions())

	orphan := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bw-orphan"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "bw-no-such-policy",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
		},
	}
	policy, binding := boundPolicy("bw-params", "int(object.data.size) <= int(params.data.max)", "too big", coreRule("configmaps"),
		[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("bw-audit")})
	policy.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	policy.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	binding.Spec.ParamRef = &admissionregistrationv1.ParamRef{
		Name: "bw-limits", Namespace: "bw-a", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction),
	}
	create(t, orphan)
	deleteAfter(t, orphan, binding, policy)
	bindFirst(t, binding, func() { create(t, policy) })

	const kind = "ValidatingAdmissionPolicyBinding"
	expectEvents(t, kind, "bw-orphan", policyNotFound("bw-no-such-policy"))
	expectEvents(t, kind, "bw-params", policyNotFound("bw-params"),
		"Warning ParamsNotFound: The binding's paramRef finds no param: no v1 ConfigMap named bw-limits exists in namespace bw-a, "+
			"so every object it matches gets an error result (parameterNotFoundAction Deny)")
	expectReport(t, "bw-a", 0, `error cm: failed to configure binding: no params found for policy binding with `+"`Deny`"+` parameterNotFoundAction`)
}

// TestCRDCompileFailedScenario audits a CRD whose rule this version cannot compile (written to etcd
// directly): the CRD gets a CompileFailed Warning Event.
func TestCRDCompileFailedScenario(t *testing.T) {
	ctx := context.Background()
	_, _ = envtestutil.StartOperator(t, env.Config, envtestutil.TestOptions())
	crd := widgetCRD("brokengizmos", "BrokenGizmo", apiextensionsv1.NamespaceScoped, apiextensionsv1.ValidationRule{Rule: "self.nosuch == 1"})
	crd.TypeMeta = metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	if err := env.StoreUnvalidated(ctx, "apiextensions.k8s.io/customresourcedefinitions/"+crd.Name, crd); err != nil {
		t.Fatal(err)
	}
	deleteAfter(t, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crd.Name}})
	expectEvents(t, "CustomResourceDefinition", crd.Name,
		"Warning CompileFailed: Not everything compiles, so the objects it covers get error results: version v1, spec.x-kubernetes-validations[0]: "+
			"rule compile error: compilation failed: ERROR: <input>:1:5: undefined field 'nosuch'\n | self.nosuch == 1\n | ....^")
}
