package vap

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestParamScope(t *testing.T) {
	configMaps := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	param := func(ns, name string, lbls map[string]string) metav1.Object {
		return &metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}
	}
	ref := func(f func(*admissionregistrationv1.ParamRef)) bindingOption { return withParamRef(f) }
	cases := []struct {
		name     string
		noParams bool
		bindings []bindingOption
		obj      metav1.Object
		wantAll  bool
		wantNS   []string
	}{
		{name: "by namespace and name", bindings: []bindingOption{ref(func(r *admissionregistrationv1.ParamRef) { r.Namespace, r.Name = "cfg", "limits" })},
			obj: param("cfg", "limits", nil), wantAll: true},
		{name: "same name, other namespace", bindings: []bindingOption{ref(func(r *admissionregistrationv1.ParamRef) { r.Namespace, r.Name = "cfg", "limits" })},
			obj: param("other", "limits", nil)},
		{name: "other name", bindings: []bindingOption{ref(func(r *admissionregistrationv1.ParamRef) { r.Namespace, r.Name = "cfg", "limits" })},
			obj: param("cfg", "unrelated", nil)},
		{name: "by name in the object's namespace", bindings: []bindingOption{ref(func(r *admissionregistrationv1.ParamRef) { r.Name = "limits" })},
			obj: param("team-a", "limits", nil), wantNS: []string{"team-a"}},
		{name: "by selector", bindings: []bindingOption{ref(func(r *admissionregistrationv1.ParamRef) {
			r.Namespace, r.Selector = "cfg", selector(map[string]string{"role": "limits"})
		})}, obj: param("cfg", "any", map[string]string{"role": "limits"}), wantAll: true},
		{name: "selector does not match", bindings: []bindingOption{ref(func(r *admissionregistrationv1.ParamRef) {
			r.Namespace, r.Selector = "cfg", selector(map[string]string{"role": "limits"})
		})}, obj: param("cfg", "any", map[string]string{"role": "other"})},
		{name: "cluster-scoped param", bindings: []bindingOption{ref(func(r *admissionregistrationv1.ParamRef) { r.Name = "global" })},
			obj: param("", "global", nil), wantAll: true},
		{name: "a binding without paramRef", bindings: []bindingOption{}, obj: param("cfg", "limits", nil)},
		{name: "a policy without paramKind", noParams: true, bindings: []bindingOption{ref(func(r *admissionregistrationv1.ParamRef) { r.Name = "limits" })},
			obj: param("cfg", "limits", nil)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := []policyOption{withValidation("true")}
			if !c.noParams {
				opts = append(opts, withParamKind(configMaps))
			}
			p := CompilePolicy(newPolicy("p", opts...), Options{}).Bind(bindings{newBinding("b", "p", c.bindings...)}, testDeps(t))
			all, nss := p.ParamScope(c.obj)
			if all != c.wantAll || !slices.Equal(nss, c.wantNS) {
				t.Errorf("ParamScope = %v, %q; want %v, %q", all, nss, c.wantAll, c.wantNS)
			}
		})
	}
}
