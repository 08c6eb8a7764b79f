package views_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
	"github.com/celaudit/celaudit/test/envtestutil"

	"github.com/celaudit/celaudit/internal/audit"
)

// clusterViews are the views of one implementation.
type clusterViews struct {
	name       string
	resources  *vap.StaticResolver
	namespaced func(schema.GroupVersionResource) (namespaced, known bool)
	params     vap.ParamSource
	namespaces vap.NamespaceGetter
}

const agreeGroup = "agree.views.test"

var (
	thingKind  = schema.GroupVersionKind{Group: agreeGroup, Version: "v1", Kind: "Thing"}
	globalKind = schema.GroupVersionKind{Group: agreeGroup, Version: "v1", Kind: "Global"}
)

// agreeFixtures are namespaces, param objects and CRDs: ConfigMaps, namespaced custom resources of a kind
// served in two versions, and cluster-scoped ones.
func agreeFixtures() []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		newCRD(agreeGroup, "things", "Thing", apiextensionsv1.NamespaceScoped,
			withVersion("v1", true, true, statusOnly), withVersion("v1beta1", true, false), withVersion("v1alpha1", false, false)),
		newCRD(agreeGroup, "globals", "Global", apiextensionsv1.ClusterScoped, withVersion("v1", true, true)),
		newNamespace("agree-a", withLabels("team", "a")),
		newNamespace("agree-b"),
		newConfigMap("agree-a", "limits", withLabels("tier", "gold", "suite", "agree"), withField("data.max", "3")),
		newConfigMap("agree-a", "other", withLabels("tier", "silver", "suite", "agree")),
		newConfigMap("agree-b", "limits", withLabels("tier", "gold", "suite", "agree"), withField("data.max", "5")),
		newObject(thingKind, "agree-b", "t2", withLabels("tier", "gold"), withField("spec.size", "l")),
		newObject(thingKind, "agree-a", "t1", withField("spec.size", "s")),
		newObject(globalKind, "", "g1", withLabels("tier", "gold")),
		newObject(globalKind, "", "g2"),
	}
}

// TestViewsAgree reads the same objects through the three implementations: the informer-backed and live
// ones over a control plane that stores them, the one from files over the objects themselves.
func TestViewsAgree(t *testing.T) {
	e := testEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	objs := agreeFixtures()
	if err := envtestutil.Apply(ctx, e.Client, objs...); err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}

	// Informer-backed, as the operator wires them: its params track every object of the param kinds.
	d := refreshedDiscovery(t)
	envtestutil.Eventually(t, 30*time.Second, func() error { // discovery follows the CRDs with a delay
		if err := d.Refresh(ctx); err != nil {
			return err
		}
		for _, gvk := range []schema.GroupVersionKind{thingKind, globalKind, {Group: agreeGroup, Version: "v1beta1", Kind: "Thing"}} {
			if _, err := d.Snapshot().ResourceForKind(gvk); err != nil {
				return err
			}
		}
		return nil
	})
	params := startParams(t, d, func(schema.GroupVersionKind, ...metav1.Object) {})
	everything := []*admissionregistrationv1.ParamRef{{Selector: &metav1.LabelSelector{}}}
	for _, gvk := range []schema.GroupVersionKind{configMapKind, thingKind, globalKind} {
		if err := params.Track(ctx, audit.VAPKey(gvk.Kind), &gvk, everything); err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactory(kubernetes.NewForConfigOrDie(e.Config), 0)
	nsInformer := factory.Core().V1().Namespaces().Informer()
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() }) // Shutdown waits for the informers to stop
	if !toolscache.WaitForCacheSync(ctx.Done(), nsInformer.HasSynced) {
		t.Fatal("namespace informer did not sync")
	}
	fallback := func(context.Context, string) (*corev1.Namespace, error) {
		return nil, fmt.Errorf("read through the fallback after the informer synced")
	}
	informer := clusterViews{name: "informer", resources: d.Snapshot(), namespaced: d.Namespaced, params: params,
		namespaces: views.NewInformerNamespaces(nsInformer.GetStore(), nsInformer.HasSynced, fallback)}

	liveResources, err := views.LiveResources(ctx, disc)
	if err != nil {
		t.Fatal(err)
	}
	live := clusterViews{name: "live", resources: liveResources, namespaced: liveResources.Namespaced,
		params: views.NewLiveParams(ctx, dyn, liveResources, 2), namespaces: views.NewLiveNamespaces(ctx, dyn)}

	fileResources, err := views.FileResources(objs)
	if err != nil {
		t.Fatal(err)
	}
	fileNamespaces, err := views.NewFileNamespaces(objs)
	if err != nil {
		t.Fatal(err)
	}
	files := clusterViews{name: "files", resources: fileResources, namespaced: fileResources.Namespaced,
		params: views.NewFileParams(objs), namespaces: fileNamespaces}

	all := []clusterViews{informer, live, files}
	// agree checks that every implementation answers want.
	agree := func(t *testing.T, want string, answer func(v clusterViews) string) {
		t.Helper()
		for _, v := range all {
			if got := answer(v); got != want {
				t.Errorf("%s answers %s, want %s", v.name, got, want)
			}
		}
	}

	gold := labels.SelectorFromSet(labels.Set{"tier": "gold"})
	gets := []struct {
		gvk             schema.GroupVersionKind
		namespace, name string
		want            string
	}{
		{configMapKind, "agree-a", "limits", `{"data":{"max":"3"},"labels":{"suite":"agree","tier":"gold"},"name":"agree-a/limits"}`},
		{configMapKind, "agree-b", "limits", `{"data":{"max":"5"},"labels":{"suite":"agree","tier":"gold"},"name":"agree-b/limits"}`},
		{configMapKind, "agree-a", "missing", "NotFound"},
		{configMapKind, "", "limits", "NotFound"},
		{thingKind, "agree-a", "t1", `{"name":"agree-a/t1","spec":{"size":"s"}}`},
		{thingKind, "agree-a", "t2", "NotFound"},
		{globalKind, "", "g1", `{"labels":{"tier":"gold"},"name":"/g1"}`},
		{globalKind, "agree-a", "g1", "NotFound"},
	}
	for _, c := range gets {
		t.Run(fmt.Sprintf("Get %s %s/%s", c.gvk.Kind, c.namespace, c.name), func(t *testing.T) {
			agree(t, c.want, func(v clusterViews) string {
				o, err := v.params.Get(c.gvk, c.namespace, c.name)
				return content(t, objectList(o), err)
			})
		})
	}
	lists := []struct {
		gvk       schema.GroupVersionKind
		namespace string
		selector  labels.Selector
		want      string
	}{
		{configMapKind, "agree-a", nil, "agree-a/limits agree-a/other"},
		{configMapKind, "agree-a", gold, "agree-a/limits"},
		{configMapKind, "", labels.SelectorFromSet(labels.Set{"suite": "agree", "tier": "gold"}), "agree-a/limits agree-b/limits"},
		{configMapKind, "agree-a", labels.Nothing(), ""},
		{thingKind, "", nil, "agree-a/t1 agree-b/t2"},
		{thingKind, "", gold, "agree-b/t2"},
		{thingKind, "agree-b", nil, "agree-b/t2"},
		{globalKind, "", nil, "/g1 /g2"},
		{globalKind, "", gold, "/g1"},
		{globalKind, "agree-a", nil, ""},
	}
	for _, c := range lists {
		t.Run(fmt.Sprintf("List %s %q %v", c.gvk.Kind, c.namespace, c.selector), func(t *testing.T) {
			agree(t, c.want, func(v clusterViews) string { return keys(v.params.List(c.gvk, c.namespace, c.selector)) })
		})
	}
	for _, c := range []struct{ name, want string }{
		{"agree-a", `{"kubernetes.io/metadata.name":"agree-a","team":"a"}`},
		{"agree-b", `{"kubernetes.io/metadata.name":"agree-b"}`},
		{"agree-missing", "NotFound"},
	} {
		t.Run("Namespace "+c.name, func(t *testing.T) {
			agree(t, c.want, func(v clusterViews) string {
				ns, err := v.namespaces.Get(c.name)
				if err != nil {
					if _, ok := err.(apierrors.APIStatus); ok && apierrors.IsNotFound(err) { //nolint:errorlint // the namespace matcher type-asserts
						return "NotFound"
					}
					return "error: " + err.Error()
				}
				data, _ := json.Marshal(ns.Labels)
				return string(data)
			})
		})
	}

	thing := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: agreeGroup, Version: v, Resource: "things"}
	}
	globals := schema.GroupVersionResource{Group: agreeGroup, Version: "v1", Resource: "globals"}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	for _, c := range []struct {
		gvr  schema.GroupVersionResource
		want string
	}{
		{configMaps, "namespaced"},
		{thing("v1"), "namespaced"},
		{thing("v1beta1"), "namespaced"},
		{thing("v1alpha1"), "not served"},
		{globals, "cluster"},
		{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "cluster"},
	} {
		t.Run("Namespaced "+c.gvr.String(), func(t *testing.T) {
			agree(t, c.want, func(v clusterViews) string {
				switch namespaced, known := v.namespaced(c.gvr); {
				case !known:
					return "not served"
				case namespaced:
					return "namespaced"
				default:
					return "cluster"
				}
			})
		})
	}
	for _, c := range []struct {
		gvk  schema.GroupVersionKind
		want string
	}{
		{configMapKind, `{"Resource":{"Group":"","Version":"v1","Resource":"configmaps"},"Kind":"ConfigMap","Namespaced":true,"Auditable":true}`},
		{thingKind, `{"Resource":{"Group":"agree.views.test","Version":"v1","Resource":"things"},"Kind":"Thing","Namespaced":true,"Auditable":true}`},
		{globalKind, `{"Resource":{"Group":"agree.views.test","Version":"v1","Resource":"globals"},"Kind":"Global","Namespaced":false,"Auditable":true}`},
		{schema.GroupVersionKind{Group: agreeGroup, Version: "v1alpha1", Kind: "Thing"}, "not served"},
	} {
		t.Run("ResourceForKind "+c.gvk.String(), func(t *testing.T) {
			agree(t, c.want, func(v clusterViews) string {
				r, err := v.resources.ResourceForKind(c.gvk)
				if err != nil {
					return "not served"
				}
				data, _ := json.Marshal(r)
				return string(data)
			})
		})
	}
	for _, c := range []struct {
		gvr         schema.GroupVersionResource
		subresource string
		want        []schema.GroupVersionResource
	}{
		{thing("v1"), "", []schema.GroupVersionResource{thing("v1"), thing("v1beta1")}},
		{thing("v1beta1"), "", []schema.GroupVersionResource{thing("v1"), thing("v1beta1")}},
		{thing("v1"), "status", []schema.GroupVersionResource{thing("v1")}},
		{globals, "", []schema.GroupVersionResource{globals}},
		{configMaps, "", []schema.GroupVersionResource{configMaps}},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "",
			[]schema.GroupVersionResource{{Group: "apps", Version: "v1", Resource: "deployments"}}},
	} {
		t.Run("EquivalentResourcesFor "+c.gvr.String()+" "+c.subresource, func(t *testing.T) {
			agree(t, fmt.Sprint(c.want), func(v clusterViews) string {
				return fmt.Sprint(v.resources.EquivalentResourcesFor(c.gvr, c.subresource))
			})
		})
	}
	t.Run("ServedResources of the CRDs", func(t *testing.T) {
		want := fmt.Sprint([]schema.GroupVersionResource{globals, thing("v1"), thing("v1beta1")})
		agree(t, want, func(v clusterViews) string {
			var ours []schema.GroupVersionResource
			for _, r := range v.resources.ServedResources() {
				if r.Resource.Group == agreeGroup {
					ours = append(ours, r.Resource)
				}
			}
			return fmt.Sprint(ours)
		})
	})
}

// content renders what an evaluation reads of param objects: name, labels, data and spec.
func content(t *testing.T, objs []runtime.Object, err error) string {
	t.Helper()
	if err != nil {
		return keys(nil, err)
	}
	var out []map[string]any
	for _, o := range objs {
		u := o.(*unstructured.Unstructured)
		m := map[string]any{"name": u.GetNamespace() + "/" + u.GetName()}
		if l := u.GetLabels(); len(l) > 0 {
			m["labels"] = l
		}
		for _, f := range []string{"data", "spec"} {
			if v, ok := u.Object[f]; ok {
				m[f] = v
			}
		}
		out = append(out, m)
	}
	if len(out) == 1 {
		return toCompactJSON(t, out[0])
	}
	return toCompactJSON(t, out)
}

func toCompactJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
