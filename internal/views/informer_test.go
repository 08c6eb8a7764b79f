package views_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
	"github.com/celaudit/celaudit/test/envtestutil"

	"github.com/celaudit/celaudit/internal/audit"
)

// startParams returns a running Params over the test control plane, whose changes go to changed.
func startParams(t *testing.T, resources *views.Discovery, changed func(schema.GroupVersionKind, ...metav1.Object)) *views.Params {
	t.Helper()
	return startParamsWith(t, testEnv(t).Config, resources, changed, nil)
}

// startParamsWith returns a running Params reading through cfg, which never reads the kinds in withheld.
func startParamsWith(t *testing.T, cfg *rest.Config, resources *views.Discovery, changed func(schema.GroupVersionKind, ...metav1.Object),
	withheld map[schema.GroupVersionKind]error) *views.Params {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	params := views.NewParams(dyn, func() vap.ResourceResolver { return resources.Snapshot() }, changed, withheld)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- params.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return params
}

func refreshedDiscovery(t *testing.T) *views.Discovery {
	t.Helper()
	client, err := discovery.NewDiscoveryClientForConfig(testEnv(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	d := views.NewDiscovery(client)
	if err := d.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return d
}

// changes records the param changes Params reports.
type changes struct {
	mu   sync.Mutex
	seen []string
}

func (c *changes) record(gvk schema.GroupVersionKind, objs ...metav1.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range objs {
		c.seen = append(c.seen, fmt.Sprintf("%s %s/%s", gvk.Kind, o.GetNamespace(), o.GetName()))
	}
}

func (c *changes) contains(s string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.seen {
		if x == s {
			return true
		}
	}
	return false
}

// TestParams shows that Params holds exactly the objects bindings reference, follows their changes and
// forgets them once no policy reads them.
func TestParams(t *testing.T) {
	e := testEnv(t)
	ctx := context.Background()
	const prefix = "informer"
	a, b := prefix+"-a", prefix+"-b"
	if err := envtestutil.Apply(ctx, e.Client, liveFixtures(prefix)...); err != nil {
		t.Fatal(err)
	}
	seen := &changes{}
	params := startParams(t, refreshedDiscovery(t), seen.record)
	refs := []*admissionregistrationv1.ParamRef{
		{Namespace: a, Name: "cm-1"},
		{Namespace: b, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}},
	}
	if err := params.Track(ctx, audit.VAPKey("by-name-and-selector"), &configMapKind, refs); err != nil {
		t.Fatal(err)
	}
	if err := params.Track(ctx, audit.VAPKey("cluster-scoped"), &clusterRoleKind, []*admissionregistrationv1.ParamRef{{Name: prefix + "-role"}}); err != nil {
		t.Fatal(err)
	}
	getCases := []struct {
		name                  string
		gvk                   schema.GroupVersionKind
		namespace, objectName string
		want                  string
	}{
		{"referenced by name", configMapKind, a, "cm-1", a + "/cm-1"},
		{"referenced by selector", configMapKind, b, "cm-0", b + "/cm-0"},
		{"not referenced", configMapKind, a, "cm-0", "NotFound"},
		{"a namespaced object without its namespace", configMapKind, "", "cm-1", "NotFound"},
		{"cluster-scoped", clusterRoleKind, "", prefix + "-role", "/" + prefix + "-role"},
		{"cluster-scoped, asked in a namespace", clusterRoleKind, a, prefix + "-role", "NotFound"},
	}
	for _, c := range getCases {
		t.Run("Get "+c.name, func(t *testing.T) {
			o, err := params.Get(c.gvk, c.namespace, c.objectName)
			if got := keys(objectList(o), err); got != c.want {
				t.Errorf("Get = %s, want %s", got, c.want)
			}
		})
	}
	listCases := []struct {
		name      string
		namespace string
		selector  labels.Selector
		want      string
	}{
		{"every namespace: only what is referenced", "", nil, a + "/cm-1 " + b + "/cm-0"},
		{"one namespace", a, labels.Everything(), a + "/cm-1"},
		{"by label", "", labels.SelectorFromSet(labels.Set{"tier": "gold"}), b + "/cm-0"},
	}
	for _, c := range listCases {
		t.Run("List "+c.name, func(t *testing.T) {
			if got := keys(params.List(configMapKind, c.namespace, c.selector)); got != c.want {
				t.Errorf("List = %q, want %q", got, c.want)
			}
		})
	}

	t.Run("a change of a referenced object is reported", func(t *testing.T) {
		if err := envtestutil.Apply(ctx, e.Client, newConfigMap(a, "cm-1", withField("data.n", "changed"))); err != nil {
			t.Fatal(err)
		}
		envtestutil.Eventually(t, 10*time.Second, func() error {
			if !seen.contains("ConfigMap " + a + "/cm-1") {
				return fmt.Errorf("changes reported: %v", seen.seen)
			}
			return nil
		})
	})

	t.Run("objects no policy reads are forgotten", func(t *testing.T) {
		if err := params.Track(ctx, audit.VAPKey("by-name-and-selector"), nil, nil); err != nil {
			t.Fatal(err)
		}
		if o, err := params.Get(configMapKind, a, "cm-1"); keys(objectList(o), err) != "NotFound" {
			t.Errorf("Get = %v, %v; want NotFound", o, err)
		}
		if got := keys(params.List(configMapKind, "", nil)); got != "" {
			t.Errorf("List = %q, want nothing", got)
		}
	})
}

// TestParamsWithheld shows that params of a withheld kind are never read, whatever policies ask for: Get and
// List answer with the reason, and no request for them reaches the API server, while other kinds are served.
func TestParamsWithheld(t *testing.T) {
	e := testEnv(t)
	ctx := context.Background()
	const ns = "withheld-params"
	secretKind := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	if err := envtestutil.Apply(ctx, e.Client,
		newNamespace(ns),
		newObject(secretKind, ns, "token", withField("data.token", "cGFyYW0tdG9rZW4=")),
		newConfigMap(ns, "limits"),
	); err != nil {
		t.Fatal(err)
	}
	reason := errors.New("ask for it")
	counter := &envtestutil.RequestCounter{}
	params := startParamsWith(t, counter.Wrap(e.Config), refreshedDiscovery(t), func(schema.GroupVersionKind, ...metav1.Object) {},
		map[schema.GroupVersionKind]error{secretKind: reason})
	if err := params.Track(ctx, audit.VAPKey("secret-params"), &secretKind, []*admissionregistrationv1.ParamRef{
		{Namespace: ns, Name: "token"},
		{Selector: &metav1.LabelSelector{}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := params.Track(ctx, audit.VAPKey("config-params"), &configMapKind, []*admissionregistrationv1.ParamRef{{Namespace: ns, Name: "limits"}}); err != nil {
		t.Fatal(err)
	}
	if err := params.ParamsWithheld(secretKind); !errors.Is(err, reason) {
		t.Errorf("ParamsWithheld(Secret) = %v, want %v", err, reason)
	}
	if err := params.ParamsWithheld(configMapKind); err != nil {
		t.Errorf("ParamsWithheld(ConfigMap) = %v, want nil", err)
	}
	if o, err := params.Get(secretKind, ns, "token"); o != nil || !errors.Is(err, reason) {
		t.Errorf("Get of the Secret = %v, %v; want the reason", o, err)
	}
	if objs, err := params.List(secretKind, "", nil); len(objs) != 0 || !errors.Is(err, reason) {
		t.Errorf("List of Secrets = %v, %v; want the reason", objs, err)
	}
	if o, err := params.Get(configMapKind, ns, "limits"); keys(objectList(o), err) != ns+"/limits" {
		t.Errorf("Get of the ConfigMap = %v, %v", o, err)
	}
	for _, verb := range []string{"get", "list", "watch"} {
		if n := counter.Get(verb, "secrets"); n != 0 {
			t.Errorf("%d %s requests of secrets", n, verb)
		}
	}
	// Informers read with a LIST, or a WATCH that starts with every object (streaming lists).
	if counter.Get("list", "configmaps")+counter.Get("watch", "configmaps") == 0 {
		t.Error("no read of configmaps: the count is not working")
	}
}

// TestDiscovery shows that Refresh tells subscribers when the served resources change, and only then.
func TestDiscovery(t *testing.T) {
	e := testEnv(t)
	d := refreshedDiscovery(t)
	changed := 0
	d.OnChange(func() { changed++ })
	before := d.Snapshot()
	if err := d.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if changed != 0 || d.Snapshot() != before {
		t.Fatalf("a refresh without change: %d notifications, snapshot replaced %v", changed, d.Snapshot() != before)
	}
	gvr := schema.GroupVersionResource{Group: "discovery.views.test", Version: "v1", Resource: "sprockets"}
	if _, known := d.Namespaced(gvr); known {
		t.Fatal("sprockets served before their CRD is installed")
	}
	crd := newCRD(gvr.Group, gvr.Resource, "Sprocket", apiextensionsv1.ClusterScoped, withVersion("v1", true, true))
	if err := envtestutil.Apply(context.Background(), e.Client, crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), crd) })
	envtestutil.Eventually(t, 30*time.Second, func() error {
		if err := d.Refresh(context.Background()); err != nil {
			return err
		}
		if namespaced, known := d.Namespaced(gvr); !known || namespaced {
			return fmt.Errorf("sprockets: namespaced %v, known %v", namespaced, known)
		}
		return nil
	})
	if changed != 1 || d.Snapshot() == before {
		t.Errorf("installing a CRD: %d notifications, snapshot replaced %v; want 1, true", changed, d.Snapshot() != before)
	}
}
