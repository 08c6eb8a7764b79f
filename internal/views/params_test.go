package views

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestQueryFor(t *testing.T) {
	cm := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	cases := []struct {
		name       string
		namespaced bool
		ref        *admissionregistrationv1.ParamRef
		want       paramQuery
		ok         bool
	}{
		{"by namespace and name", true, &admissionregistrationv1.ParamRef{Namespace: "cfg", Name: "limits"},
			paramQuery{gvk: cm, namespace: "cfg", name: "limits"}, true},
		{"by name in every audited namespace", true, &admissionregistrationv1.ParamRef{Name: "limits"},
			paramQuery{gvk: cm, name: "limits"}, true},
		{"by selector", true, &admissionregistrationv1.ParamRef{Namespace: "cfg", Selector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"tier": "gold", "app": "x"}}},
			paramQuery{gvk: cm, namespace: "cfg", selector: "app=x,tier=gold"}, true},
		{"a namespace on a cluster-scoped kind is ignored", false, &admissionregistrationv1.ParamRef{Namespace: "cfg", Name: "global"},
			paramQuery{gvk: cm, name: "global"}, true},
		{"neither name nor selector", true, &admissionregistrationv1.ParamRef{Namespace: "cfg"}, paramQuery{}, false},
		{"an invalid selector", true, &admissionregistrationv1.ParamRef{Selector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}}, paramQuery{}, false},
		{"no paramRef", true, nil, paramQuery{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := queryFor(cm, c.namespaced, c.ref)
			if ok != c.ok || got != c.want {
				t.Errorf("queryFor = %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}
