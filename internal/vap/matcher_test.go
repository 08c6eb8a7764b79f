package vap

import (
	"fmt"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
)

// The caching matcher decides exactly as the apiserver's, errors included, and keeps deciding the same when
// asked again (from its cache).
func TestSelectorCachingMatcherAgreesWithUpstream(t *testing.T) {
	lister := namespaceLister{getter: testNamespaces()}
	m := matching.NewMatcher(lister, namespaceClient{lister: lister})
	upstream := generic.NewPolicyMatcher(m)
	caching := newSelectorCachingMatcher(m)
	deploys := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	rules := []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}},
	}}}
	labelled := func(ns, obj *metav1.LabelSelector) *admissionregistrationv1.MatchResources {
		return &admissionregistrationv1.MatchResources{ResourceRules: rules, NamespaceSelector: ns, ObjectSelector: obj}
	}
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near"}}}
	constraints := []*admissionregistrationv1.MatchResources{
		nil,
		labelled(nil, &metav1.LabelSelector{}),
		labelled(&metav1.LabelSelector{}, nil),
		labelled(&metav1.LabelSelector{}, &metav1.LabelSelector{}),
		labelled(selector(map[string]string{"env": "prod"}), &metav1.LabelSelector{}),
		labelled(&metav1.LabelSelector{}, selector(map[string]string{"app": "web"})),
		labelled(bad, &metav1.LabelSelector{}),
		labelled(&metav1.LabelSelector{}, bad),
	}
	objects := []admission.Attributes{
		objectAttributes(newDeployment("prod", "d", 1), APIResource{Resource: deploys, Kind: "Deployment"}, admission.Create),
		objectAttributes(newDeployment("dev", "d", 1, withLabels(map[string]string{"app": "web"})), APIResource{Resource: deploys, Kind: "Deployment"}, admission.Update),
		objectAttributes(newDeployment("gone", "d", 1), APIResource{Resource: deploys, Kind: "Deployment"}, admission.Create),
	}
	for i, c := range constraints {
		policy := newPolicy("p")
		policy.Spec.MatchConstraints = c
		binding := newBinding("b", "p")
		binding.Spec.MatchResources = c
		for j, a := range objects {
			for round := range 2 {
				name := fmt.Sprintf("constraints %d, object %d, round %d", i, j, round)
				wm, wr, wk, werr := upstream.DefinitionMatches(a, objectInterfaces{}, validating.NewValidatingAdmissionPolicyAccessor(policy))
				gm, gr, gk, gerr := caching.DefinitionMatches(a, objectInterfaces{}, validating.NewValidatingAdmissionPolicyAccessor(policy))
				if gm != wm || gr != wr || gk != wk || fmt.Sprint(gerr) != fmt.Sprint(werr) {
					t.Errorf("%s: definition %v %v %v %v, upstream %v %v %v %v", name, gm, gr, gk, gerr, wm, wr, wk, werr)
				}
				wb, werr := upstream.BindingMatches(a, objectInterfaces{}, validating.NewValidatingAdmissionPolicyBindingAccessor(binding))
				gb, gerr := caching.BindingMatches(a, objectInterfaces{}, validating.NewValidatingAdmissionPolicyBindingAccessor(binding))
				if gb != wb || fmt.Sprint(gerr) != fmt.Sprint(werr) {
					t.Errorf("%s: binding %v %v, upstream %v %v", name, gb, gerr, wb, werr)
				}
			}
		}
	}
}
