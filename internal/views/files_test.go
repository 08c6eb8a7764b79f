package views_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
	"github.com/celaudit/celaudit/test/envtestutil"
)

func TestFileNamespaces(t *testing.T) {
	objs := []*unstructured.Unstructured{
		newNamespace("team-a", withLabels("env", "staging")),
		newNamespace("team-b"),
		newConfigMap("team-a", "team-c"), // not a namespace
		newNamespace("team-a", withLabels("env", "prod")),
	}
	ns, err := views.NewFileNamespaces(objs)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		labels map[string]string // nil: NotFound
	}{
		{"team-a", map[string]string{"env": "prod", "kubernetes.io/metadata.name": "team-a"}},
		{"team-b", map[string]string{"kubernetes.io/metadata.name": "team-b"}},
		{"team-c", nil},
		{"missing", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ns.Get(c.name)
			if c.labels == nil {
				if _, ok := err.(apierrors.APIStatus); !ok || !apierrors.IsNotFound(err) { //nolint:errorlint // the namespace matcher type-asserts
					t.Fatalf("Get = %v, %v; want an unwrapped NotFound", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != c.name || !reflect.DeepEqual(got.Labels, c.labels) {
				t.Errorf("Get = %s with labels %v, want %s with labels %v", got.Name, got.Labels, c.name, c.labels)
			}
		})
	}
	t.Run("a Namespace that does not decode", func(t *testing.T) {
		bad := newNamespace("bad", withField("spec.finalizers", "kubernetes"))
		if _, err := views.NewFileNamespaces([]*unstructured.Unstructured{bad}); err == nil || !strings.Contains(err.Error(), "bad") {
			t.Errorf("NewFileNamespaces = %v, want an error naming the namespace", err)
		}
	})
}

var (
	gadgetKind = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}
	betaGadget = schema.GroupVersionKind{Group: "example.com", Version: "v1beta1", Kind: "Gadget"}
)

// paramFixtures are param objects in no particular order, with a duplicate.
func paramFixtures() []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		newConfigMap("b", "limits", withLabels("tier", "gold"), withField("data.max", "1")),
		newConfigMap("a", "other", withLabels("tier", "silver")),
		newConfigMap("a", "limits", withLabels("tier", "gold")),
		newConfigMap("a-b", "limits", withLabels("tier", "gold")), // "a-b/" sorts before "a/"
		newObject(gadgetKind, "", "global", withLabels("tier", "gold")),
		newObject(betaGadget, "", "beta"),
		newConfigMap("b", "limits", withLabels("tier", "gold"), withField("data.max", "2")), // replaces the first
	}
}

// keys returns the namespace/name of objects, or "NotFound" for a NotFound error.
func keys(objs []runtime.Object, err error) string {
	if apierrors.IsNotFound(err) {
		return "NotFound"
	}
	if err != nil {
		return "error: " + err.Error()
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		m := o.(metav1.Object)
		out = append(out, m.GetNamespace()+"/"+m.GetName())
	}
	return strings.Join(out, " ")
}

func TestFileParams(t *testing.T) {
	params := views.NewFileParams(paramFixtures())
	gold := labels.SelectorFromSet(labels.Set{"tier": "gold"})
	getCases := []struct {
		name                  string
		gvk                   schema.GroupVersionKind
		namespace, objectName string
		want                  string
	}{
		{"by namespace and name", configMapKind, "a", "limits", "a/limits"},
		{"a namespaced object without its namespace", configMapKind, "", "limits", "NotFound"},
		{"in another namespace", configMapKind, "c", "limits", "NotFound"},
		{"cluster-scoped", gadgetKind, "", "global", "/global"},
		{"cluster-scoped, asked in a namespace", gadgetKind, "a", "global", "NotFound"},
		{"another version of the kind", betaGadget, "", "global", "NotFound"},
		{"a kind without objects", schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, "a", "limits", "NotFound"},
	}
	for _, c := range getCases {
		t.Run("Get "+c.name, func(t *testing.T) {
			o, err := params.Get(c.gvk, c.namespace, c.objectName)
			if got := keys(objectList(o), err); got != c.want {
				t.Errorf("Get = %s, want %s", got, c.want)
			}
		})
	}
	t.Run("Get returns the later of two objects with one name", func(t *testing.T) {
		o, err := params.Get(configMapKind, "b", "limits")
		if err != nil {
			t.Fatal(err)
		}
		if v, _, _ := unstructured.NestedString(o.(*unstructured.Unstructured).Object, "data", "max"); v != "2" {
			t.Errorf("data.max = %q, want 2", v)
		}
	})
	listCases := []struct {
		name      string
		gvk       schema.GroupVersionKind
		namespace string
		selector  labels.Selector
		want      string
	}{
		{"every namespace, nil selector", configMapKind, "", nil, "a-b/limits a/limits a/other b/limits"},
		{"one namespace", configMapKind, "a", labels.Everything(), "a/limits a/other"},
		{"every namespace, by label", configMapKind, "", gold, "a-b/limits a/limits b/limits"},
		{"one namespace, by label", configMapKind, "a", gold, "a/limits"},
		{"nothing", configMapKind, "", labels.Nothing(), ""},
		{"cluster-scoped", gadgetKind, "", gold, "/global"},
		{"cluster-scoped, in a namespace", gadgetKind, "a", nil, ""},
		{"a kind without objects", schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, "", nil, ""},
	}
	for _, c := range listCases {
		t.Run("List "+c.name, func(t *testing.T) {
			if got := keys(params.List(c.gvk, c.namespace, c.selector)); got != c.want {
				t.Errorf("List = %q, want %q", got, c.want)
			}
		})
	}
}

// fileCRDs are the CRDs of the file tests: several versions, one not served, one without subresources;
// two CRDs in group; a cluster-scoped CRD in laterGroup, which sorts after group.
func fileCRDs(group, laterGroup string) []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		newCRD(group, "widgets", "Widget", apiextensionsv1.NamespaceScoped,
			withVersion("v1beta1", true, false),
			withVersion("v1", true, true, statusAndScale),
			withVersion("v1alpha1", false, false),
			withShortNames("wd"), withCategories("all")),
		newCRD(group, "bolts", "Bolt", apiextensionsv1.NamespaceScoped, withVersion("v2", true, true, statusOnly)),
		newCRD(laterGroup, "gadgets", "Gadget", apiextensionsv1.ClusterScoped, withVersion("v1", true, true)),
		newConfigMap("a", "not-a-crd"),
	}
}

func TestFileDiscovery(t *testing.T) {
	snap, err := views.FileDiscovery(fileCRDs("example.com", "other.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	builtin, err := views.BuiltinDiscovery()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(snap.Groups[:len(builtin.Groups)], builtin.Groups) || !reflect.DeepEqual(snap.Resources[:len(builtin.Resources)], builtin.Resources) {
		t.Error("the built-in groups do not come first, unchanged")
	}
	gv := func(gv string) metav1.GroupVersionForDiscovery {
		_, v, _ := strings.Cut(gv, "/")
		return metav1.GroupVersionForDiscovery{GroupVersion: gv, Version: v}
	}
	wantGroups := []*metav1.APIGroup{
		{Name: "example.com", Versions: []metav1.GroupVersionForDiscovery{gv("example.com/v2"), gv("example.com/v1"), gv("example.com/v1beta1")},
			PreferredVersion: gv("example.com/v2")},
		{Name: "other.example.com", Versions: []metav1.GroupVersionForDiscovery{gv("other.example.com/v1")}, PreferredVersion: gv("other.example.com/v1")},
	}
	if got := snap.Groups[len(builtin.Groups):]; !reflect.DeepEqual(got, wantGroups) {
		t.Errorf("CRD groups = %s, want %s", toJSON(t, got), toJSON(t, wantGroups))
	}
	all := metav1.Verbs{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}
	sub := metav1.Verbs{"get", "patch", "update"}
	widget := func(v string) metav1.APIResource {
		return metav1.APIResource{Name: "widgets", SingularName: "widget", Namespaced: true, Group: "example.com", Version: v, Kind: "Widget",
			Verbs: all, ShortNames: []string{"wd"}, Categories: []string{"all"}}
	}
	wantLists := []*metav1.APIResourceList{
		{GroupVersion: "example.com/v2", APIResources: []metav1.APIResource{
			{Name: "bolts", SingularName: "bolt", Namespaced: true, Group: "example.com", Version: "v2", Kind: "Bolt", Verbs: all},
			{Name: "bolts/status", SingularName: "bolt", Namespaced: true, Group: "example.com", Version: "v2", Kind: "Bolt", Verbs: sub},
		}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
			widget("v1"),
			{Name: "widgets/status", SingularName: "widget", Namespaced: true, Group: "example.com", Version: "v1", Kind: "Widget", Verbs: sub},
			{Name: "widgets/scale", SingularName: "widget", Namespaced: true, Group: "autoscaling", Version: "v1", Kind: "Scale", Verbs: sub},
		}},
		{GroupVersion: "example.com/v1beta1", APIResources: []metav1.APIResource{widget("v1beta1")}},
		{GroupVersion: "other.example.com/v1", APIResources: []metav1.APIResource{
			{Name: "gadgets", SingularName: "gadget", Group: "other.example.com", Version: "v1", Kind: "Gadget", Verbs: all},
		}},
	}
	if got := snap.Resources[len(builtin.Resources):]; !reflect.DeepEqual(got, wantLists) {
		t.Errorf("CRD resources = %s\nwant %s", toJSON(t, got), toJSON(t, wantLists))
	}

	oldAPI := newCRD("example.com", "olds", "Old", apiextensionsv1.NamespaceScoped, withVersion("v1", true, true))
	oldAPI.SetAPIVersion("apiextensions.k8s.io/v1beta1")
	undecodable := newCRD("example.com", "bads", "Bad", apiextensionsv1.NamespaceScoped)
	withField("spec.versions", "v1")(undecodable)
	errCases := []struct {
		name string
		obj  *unstructured.Unstructured
		want string
	}{
		{"a CRD of a version no longer served", oldAPI, "olds.example.com: apiextensions.k8s.io/v1beta1 is not served"},
		{"a CRD that does not decode", undecodable, "decoding CustomResourceDefinition bads.example.com"},
	}
	for _, c := range errCases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := views.FileDiscovery([]*unstructured.Unstructured{c.obj}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("FileDiscovery error = %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestFileResources(t *testing.T) {
	r, err := views.FileResources(fileCRDs("example.com", "other.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	widgets := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "example.com", Version: v, Resource: "widgets"}
	}
	gadgets := schema.GroupVersionResource{Group: "other.example.com", Version: "v1", Resource: "gadgets"}
	scopes := []struct {
		gvr               schema.GroupVersionResource
		namespaced, known bool
	}{
		{widgets("v1"), true, true},
		{widgets("v1beta1"), true, true},
		{widgets("v1alpha1"), false, false}, // not served
		{gadgets, false, true},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true, true},
		{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, false, true},
		{schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}, false, false},
	}
	for _, c := range scopes {
		t.Run("Namespaced "+c.gvr.String(), func(t *testing.T) {
			if namespaced, known := r.Namespaced(c.gvr); namespaced != c.namespaced || known != c.known {
				t.Errorf("Namespaced = %v, %v; want %v, %v", namespaced, known, c.namespaced, c.known)
			}
		})
	}
	kinds := []struct {
		gvk  schema.GroupVersionKind
		want *vap.APIResource // nil: not served
	}{
		{schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"},
			&vap.APIResource{Resource: widgets("v1"), Kind: "Widget", Namespaced: true, Auditable: true}},
		{schema.GroupVersionKind{Group: "other.example.com", Version: "v1", Kind: "Gadget"},
			&vap.APIResource{Resource: gadgets, Kind: "Gadget", Auditable: true}},
		{schema.GroupVersionKind{Group: "example.com", Version: "v1alpha1", Kind: "Widget"}, nil},
		{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			&vap.APIResource{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespaced: true, Auditable: true}},
	}
	for _, c := range kinds {
		t.Run("ResourceForKind "+c.gvk.String(), func(t *testing.T) {
			got, err := r.ResourceForKind(c.gvk)
			switch {
			case c.want == nil && err == nil:
				t.Errorf("ResourceForKind = %+v, want an error", got)
			case c.want != nil && (err != nil || got != *c.want):
				t.Errorf("ResourceForKind = %+v, %v; want %+v", got, err, *c.want)
			}
		})
	}
	equivalents := []struct {
		gvr         schema.GroupVersionResource
		subresource string
		want        []schema.GroupVersionResource
	}{
		{widgets("v1"), "", []schema.GroupVersionResource{widgets("v1"), widgets("v1beta1")}},
		{widgets("v1beta1"), "", []schema.GroupVersionResource{widgets("v1"), widgets("v1beta1")}},
		{widgets("v1"), "status", []schema.GroupVersionResource{widgets("v1")}}, // v1beta1 has no status
		{gadgets, "", []schema.GroupVersionResource{gadgets}},
	}
	for _, c := range equivalents {
		t.Run("EquivalentResourcesFor "+c.gvr.String()+" "+c.subresource, func(t *testing.T) {
			if got := r.EquivalentResourcesFor(c.gvr, c.subresource); !reflect.DeepEqual(got, c.want) {
				t.Errorf("EquivalentResourcesFor = %v, want %v", got, c.want)
			}
		})
	}
	if got, want := r.KindFor(widgets("v1"), "scale"), (schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}); got != want {
		t.Errorf("KindFor(widgets/scale) = %v, want %v", got, want)
	}
	// The CRDs' resources come after the built-in ones, their groups in name order, versions by preference.
	served := r.ServedResources()
	var tail []string
	for _, s := range served[len(served)-4:] {
		tail = append(tail, s.Resource.String())
	}
	want := []string{"example.com/v2, Resource=bolts", "example.com/v1, Resource=widgets", "example.com/v1beta1, Resource=widgets", "other.example.com/v1, Resource=gadgets"}
	if !reflect.DeepEqual(tail, want) {
		t.Errorf("last served resources = %q, want %q", tail, want)
	}
}

// TestFileDiscoveryIsServed compares the discovery FileDiscovery derives from CRDs with what kube-apiserver
// serves once they are established.
func TestFileDiscoveryIsServed(t *testing.T) {
	e := testEnv(t)
	ctx := context.Background()
	const group, laterGroup = "files.views.test", "later.files.views.test"
	objs := fileCRDs(group, laterGroup)
	crds := objs[:3]
	if err := envtestutil.Apply(ctx, e.Client, crds...); err != nil {
		t.Fatal(err)
	}
	ours := func(g string) bool { return g == group || g == laterGroup }
	want, err := views.FileDiscovery(objs)
	if err != nil {
		t.Fatal(err)
	}
	want = onlyGroups(want, ours)
	// Discovery follows the CRDs' establishment with a delay: wait until every version is served.
	var served views.DiscoverySnapshot
	envtestutil.Eventually(t, 30*time.Second, func() error {
		served = onlyGroups(servedDiscovery(t), ours)
		if len(served.Resources) != len(want.Resources) {
			return fmt.Errorf("%d of %d group versions served", len(served.Resources), len(want.Resources))
		}
		for i, l := range served.Resources {
			if len(l.APIResources) != len(want.Resources[i].APIResources) {
				return fmt.Errorf("%s serves %d of %d resources", l.GroupVersion, len(l.APIResources), len(want.Resources[i].APIResources))
			}
		}
		return nil
	})
	if !reflect.DeepEqual(served, want) {
		t.Errorf("discovery of the CRDs:\nserved %s\nFileDiscovery %s", toJSON(t, served), toJSON(t, want))
	}
}
