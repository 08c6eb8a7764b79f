package vap_test

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/celaudit/celaudit/internal/vap"
)

// namespaceMap is a vap.NamespaceGetter; a controller passes its namespace lister.
type namespaceMap map[string]*corev1.Namespace

func (m namespaceMap) Get(name string) (*corev1.Namespace, error) {
	if ns, ok := m[name]; ok {
		return ns, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
}

func Example() {
	resolver, err := vap.NewStaticResolver([]*metav1.APIResourceList{{
		GroupVersion: "apps/v1",
		APIResources: []metav1.APIResource{{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}}},
	}})
	if err != nil {
		panic(err)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "replica-limit"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression:        "object.spec.replicas <= 3",
				MessageExpression: "'replicas must be at most 3, got ' + string(object.spec.replicas)",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "replica-limit"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "replica-limit",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	// Compile once (milliseconds), bind again whenever bindings or the served resources change (microseconds).
	compiled := vap.CompilePolicy(policy, vap.Options{})
	p := compiled.Bind([]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding},
		vap.Deps{Namespaces: namespaceMap{"shop": {ObjectMeta: metav1.ObjectMeta{Name: "shop"}}}, Resolver: resolver})

	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"namespace": "shop", "name": "web"},
		"spec":     map[string]any{"replicas": int64(5)},
	}}
	fmt.Println(p.Key(), p.Resources())
	for _, gvr := range p.Resources() {
		for _, r := range p.Evaluate(context.Background(), gvr, obj) {
			fmt.Println(r.Verdict, r.Rule, r.Message)
		}
	}
	// Output:
	// vap/replica-limit [apps/v1, Resource=deployments]
	// fail validations[0] (binding replica-limit) replicas must be at most 3, got 5
}
