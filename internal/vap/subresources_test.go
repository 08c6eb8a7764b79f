package vap

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

func TestCoveredSubresources(t *testing.T) {
	scale := rule("apps", "v1", "deployments/scale")
	all := rule("*", "*", "*/*")
	deployments := rule("apps", "v1", "deployments")
	narrowTo := func(rules ...admissionregistrationv1.NamedRuleWithOperations) bindingOption {
		return withMatchResources(func(m *admissionregistrationv1.MatchResources) { m.ResourceRules = rules })
	}
	cases := []struct {
		name     string
		policy   *admissionregistrationv1.ValidatingAdmissionPolicy
		bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
		want     []string
	}{
		{name: "no subresource", policy: newPolicy("p"), bindings: []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("b", "p")}},
		{name: "a named subresource, unbound", policy: newPolicy("p", withRules(deployments, scale)), want: []string{"deployments/scale"}},
		{name: "every subresource", policy: newPolicy("p", withRules(all)),
			bindings: []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("b", "p")}, want: []string{"*/*"}},
		{name: "sorted, without duplicates", policy: newPolicy("p", withRules(scale, rule("", "v1", "pods/status"), scale)),
			want: []string{"deployments/scale", "pods/status"}},
		{name: "a binding narrowing to the resource itself judges no subresource", policy: newPolicy("p", withRules(all)),
			bindings: []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("b", "p", narrowTo(deployments))}},
		{name: "one binding of two keeping subresources is enough", policy: newPolicy("p", withRules(all)),
			bindings: []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{
				newBinding("a", "p", narrowTo(deployments)), newBinding("b", "p", narrowTo(scale))},
			want: []string{"*/*"}},
		{name: "a binding with only selectors keeps them", policy: newPolicy("p", withRules(scale)),
			bindings: []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("b", "p",
				withMatchResources(func(m *admissionregistrationv1.MatchResources) {
					m.NamespaceSelector = selector(map[string]string{"a": "b"})
				}))},
			want: []string{"deployments/scale"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := CoveredSubresources(tc.policy, tc.bindings); !slices.Equal(got, tc.want) {
				t.Errorf("CoveredSubresources = %q, want %q", got, tc.want)
			}
			// A bound policy says the same.
			if got := CompilePolicy(tc.policy, Options{}).Bind(tc.bindings, testDeps(t)).Subresources(); !slices.Equal(got, tc.want) {
				t.Errorf("Policy.Subresources = %q, want %q", got, tc.want)
			}
		})
	}
}
