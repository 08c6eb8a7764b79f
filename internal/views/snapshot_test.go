package views_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
)

// TestBuiltinDiscovery checks the embedded snapshot against facts about kube-apiserver 1.37 known
// independently of it.
func TestBuiltinDiscovery(t *testing.T) {
	snap, err := views.BuiltinDiscovery()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(snap.ServerVersion, "v1.37.") {
		t.Errorf("snapshot of kube-apiserver %s, want v1.37", snap.ServerVersion)
	}
	preferred := map[string]string{}
	for _, g := range snap.Groups {
		preferred[g.Name] = g.PreferredVersion.GroupVersion
	}
	for group, want := range map[string]string{
		"": "v1", "apps": "apps/v1", "autoscaling": "autoscaling/v2", "batch": "batch/v1",
		"admissionregistration.k8s.io": "admissionregistration.k8s.io/v1", "apiextensions.k8s.io": "apiextensions.k8s.io/v1",
	} {
		if preferred[group] != want {
			t.Errorf("preferred version of group %q = %q, want %q", group, preferred[group], want)
		}
	}
	for _, group := range []string{"extensions", "wgpolicyk8s.io"} { // removed in 1.22; a CRD group
		if _, ok := preferred[group]; ok {
			t.Errorf("group %q is in the snapshot", group)
		}
	}

	r, err := vap.NewResolverFromDiscovery(snap.Groups, snap.Resources)
	if err != nil {
		t.Fatal(err)
	}
	gvr := func(group, version, resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
	}
	resources := []struct {
		gvk  schema.GroupVersionKind
		want vap.APIResource
	}{
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			vap.APIResource{Resource: gvr("apps", "v1", "deployments"), Kind: "Deployment", Namespaced: true, Auditable: true}},
		{schema.GroupVersionKind{Version: "v1", Kind: "Namespace"},
			vap.APIResource{Resource: gvr("", "v1", "namespaces"), Kind: "Namespace", Auditable: true}},
		{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			vap.APIResource{Resource: gvr("", "v1", "configmaps"), Kind: "ConfigMap", Namespaced: true, Auditable: true}},
		{schema.GroupVersionKind{Version: "v1", Kind: "Node"},
			vap.APIResource{Resource: gvr("", "v1", "nodes"), Kind: "Node", Auditable: true}},
		{schema.GroupVersionKind{Version: "v1", Kind: "ComponentStatus"}, // get and list, no watch
			vap.APIResource{Resource: gvr("", "v1", "componentstatuses"), Kind: "ComponentStatus"}},
		{schema.GroupVersionKind{Group: "authentication.k8s.io", Version: "v1", Kind: "TokenReview"}, // create only
			vap.APIResource{Resource: gvr("authentication.k8s.io", "v1", "tokenreviews"), Kind: "TokenReview"}},
		{schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"},
			vap.APIResource{Resource: gvr("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies"), Kind: "ValidatingAdmissionPolicy", Auditable: true}},
		{schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
			vap.APIResource{Resource: gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions"), Kind: "CustomResourceDefinition", Auditable: true}},
	}
	for _, c := range resources {
		t.Run("ResourceForKind "+c.gvk.Kind, func(t *testing.T) {
			if got, err := r.ResourceForKind(c.gvk); err != nil || got != c.want {
				t.Errorf("ResourceForKind = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
	equivalents := []struct {
		gvr  schema.GroupVersionResource
		want []schema.GroupVersionResource
	}{
		// deployments.apps and extensions/deployments share storage, but extensions is not served.
		{gvr("apps", "v1", "deployments"), []schema.GroupVersionResource{gvr("apps", "v1", "deployments")}},
		// Core and events.k8s.io events share storage, and both are served.
		{gvr("", "v1", "events"), []schema.GroupVersionResource{gvr("", "v1", "events"), gvr("events.k8s.io", "v1", "events")}},
		{gvr("autoscaling", "v1", "horizontalpodautoscalers"),
			[]schema.GroupVersionResource{gvr("autoscaling", "v2", "horizontalpodautoscalers"), gvr("autoscaling", "v1", "horizontalpodautoscalers")}},
	}
	for _, c := range equivalents {
		t.Run("EquivalentResourcesFor "+c.gvr.String(), func(t *testing.T) {
			if got := r.EquivalentResourcesFor(c.gvr, ""); !sameResources(got, c.want) {
				t.Errorf("EquivalentResourcesFor = %v, want %v", got, c.want)
			}
		})
	}
	subresources := []struct {
		gvr         schema.GroupVersionResource
		subresource string
		want        schema.GroupVersionKind
	}{
		{gvr("", "v1", "pods"), "status", schema.GroupVersionKind{Version: "v1", Kind: "Pod"}},
		{gvr("", "v1", "pods"), "eviction", schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}},
		{gvr("apps", "v1", "deployments"), "scale", schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}},
	}
	for _, c := range subresources {
		t.Run("KindFor "+c.gvr.Resource+"/"+c.subresource, func(t *testing.T) {
			if got := r.KindFor(c.gvr, c.subresource); got != c.want {
				t.Errorf("KindFor = %v, want %v", got, c.want)
			}
		})
	}
	for _, s := range r.ServedResources() {
		if strings.Contains(s.Resource.Resource, "/") {
			t.Errorf("subresource %v served as a resource", s.Resource)
		}
	}
}

// sameResources compares resources regardless of order.
func sameResources(a, b []schema.GroupVersionResource) bool {
	if len(a) != len(b) {
		return false
	}
	set := map[schema.GroupVersionResource]int{}
	for _, x := range a {
		set[x]++
	}
	for _, x := range b {
		set[x]--
	}
	for _, n := range set {
		if n != 0 {
			return false
		}
	}
	return true
}

// servedDiscovery returns what the test control plane's discovery serves, as the embedded snapshot holds it:
// the lists in the order of the groups and their versions, through JSON.
func servedDiscovery(t *testing.T) views.DiscoverySnapshot {
	t.Helper()
	client, err := discovery.NewDiscoveryClientForConfig(testEnv(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	groups, lists, err := discovery.ServerGroupsAndResources(client)
	if err != nil {
		t.Fatal(err)
	}
	byGV := map[string]*metav1.APIResourceList{}
	for _, l := range lists {
		byGV[l.GroupVersion] = l
	}
	served := views.DiscoverySnapshot{Groups: groups}
	for _, g := range groups {
		for _, v := range g.Versions {
			if l := byGV[v.GroupVersion]; l != nil {
				served.Resources = append(served.Resources, l)
			}
		}
	}
	data, err := json.Marshal(served)
	if err != nil {
		t.Fatal(err)
	}
	var out views.DiscoverySnapshot
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// onlyGroups keeps the groups of snap for which keep is true, and their resource lists.
func onlyGroups(snap views.DiscoverySnapshot, keep func(group string) bool) views.DiscoverySnapshot {
	out := views.DiscoverySnapshot{}
	for _, g := range snap.Groups {
		if keep(g.Name) {
			out.Groups = append(out.Groups, g)
		}
	}
	for _, l := range snap.Resources {
		if gv, _ := schema.ParseGroupVersion(l.GroupVersion); keep(gv.Group) {
			out.Resources = append(out.Resources, l)
		}
	}
	return out
}

// TestBuiltinDiscoveryIsServed compares the embedded snapshot with the discovery of the kube-apiserver the
// tests run (KUBEBUILDER_ASSETS): every group the server serves that no CRD defines must be in the snapshot
// as served, so that a version of kube-apiserver that changes discovery fails here until the snapshot is
// taken again (make discovery-snapshot).
func TestBuiltinDiscoveryIsServed(t *testing.T) {
	e := testEnv(t)
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := e.Client.List(context.Background(), crds); err != nil {
		t.Fatal(err)
	}
	crdGroups := map[string]bool{}
	for _, crd := range crds.Items {
		crdGroups[crd.Spec.Group] = true
	}
	if len(crdGroups) == 0 {
		t.Fatal("no CRD installed: the comparison would not show that CRD groups are left out")
	}
	served := onlyGroups(servedDiscovery(t), func(g string) bool { return !crdGroups[g] })
	builtin, err := views.BuiltinDiscovery()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(served.Groups, builtin.Groups) {
		t.Errorf("served groups differ from the snapshot's: run make discovery-snapshot\nserved: %s\nsnapshot: %s", toJSON(t, served.Groups), toJSON(t, builtin.Groups))
	}
	if len(served.Resources) != len(builtin.Resources) {
		t.Fatalf("%d group versions served, %d in the snapshot: run make discovery-snapshot", len(served.Resources), len(builtin.Resources))
	}
	for i := range served.Resources {
		if !reflect.DeepEqual(served.Resources[i], builtin.Resources[i]) {
			t.Errorf("resources of %s differ from the snapshot's: run make discovery-snapshot\nserved: %s\nsnapshot: %s",
				served.Resources[i].GroupVersion, toJSON(t, served.Resources[i]), toJSON(t, builtin.Resources[i]))
		}
	}
}
