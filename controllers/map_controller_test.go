package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/vap"
)

// TestSameParamKinds decides whether a discovery change leaves the chain's results as they are: only when
// every policy's params are served, or not, as before.
func TestSameParamKinds(t *testing.T) {
	resolver := func(kinds ...string) *vap.StaticResolver {
		list := &metav1.APIResourceList{GroupVersion: "example.com/v1"}
		for _, k := range kinds {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: k + "s", Kind: k, Namespaced: true,
				Verbs: metav1.Verbs{"get", "list", "watch"}})
		}
		r, err := vap.NewStaticResolver([]*metav1.APIResourceList{list})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	kind := func(k string) *schema.GroupVersionKind {
		return &schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: k}
	}
	state := func(r *vap.StaticResolver, paramKinds map[string]*schema.GroupVersionKind) *mapState {
		st := &mapState{resolver: r, policies: map[audit.PolicyKey]mapPolicy{}}
		for name, gvk := range paramKinds {
			st.policies[audit.MAPKey(name)] = mapPolicy{paramKind: gvk}
		}
		return st
	}
	for _, tc := range []struct {
		name      string
		st, next  *mapState
		unchanged bool
	}{{
		name:      "no params: discovery changes no result",
		st:        state(resolver(), map[string]*schema.GroupVersionKind{"a": nil}),
		next:      state(resolver("Widget"), map[string]*schema.GroupVersionKind{"a": nil}),
		unchanged: true,
	}, {
		name:      "params served before and after",
		st:        state(resolver("Setting"), map[string]*schema.GroupVersionKind{"a": kind("Setting")}),
		next:      state(resolver("Setting", "Widget"), map[string]*schema.GroupVersionKind{"a": kind("Setting")}),
		unchanged: true,
	}, {
		name: "params served now",
		st:   state(resolver(), map[string]*schema.GroupVersionKind{"a": kind("Setting")}),
		next: state(resolver("Setting"), map[string]*schema.GroupVersionKind{"a": kind("Setting")}),
	}, {
		name: "params no longer served",
		st:   state(resolver("Setting"), map[string]*schema.GroupVersionKind{"a": nil, "b": kind("Setting")}),
		next: state(resolver(), map[string]*schema.GroupVersionKind{"a": nil, "b": kind("Setting")}),
	}, {
		name: "a policy new to the chain reads params",
		st:   state(resolver("Setting"), map[string]*schema.GroupVersionKind{"a": nil}),
		next: state(resolver("Setting"), map[string]*schema.GroupVersionKind{"a": nil, "b": kind("Setting")}),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameParamKinds(tc.st, tc.next); got != tc.unchanged {
				t.Errorf("sameParamKinds = %v, want %v", got, tc.unchanged)
			}
		})
	}
}
