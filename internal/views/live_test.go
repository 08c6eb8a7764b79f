package views_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/celaudit/celaudit/internal/views"
	"github.com/celaudit/celaudit/test/envtestutil"
)

var clusterRoleKind = schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}

// liveViews returns live views of the test control plane whose requests counter counts.
func liveViews(t *testing.T, counter *envtestutil.RequestCounter, pageSize int64) (*views.LiveParams, *views.LiveNamespaces) {
	t.Helper()
	cfg := counter.Wrap(testEnv(t).Config)
	return liveViewsFor(t, cfg, pageSize)
}

func liveViewsFor(t *testing.T, cfg *rest.Config, pageSize int64) (*views.LiveParams, *views.LiveNamespaces) {
	t.Helper()
	ctx := context.Background()
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resources, err := views.LiveResources(ctx, disc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return views.NewLiveParams(ctx, dyn, resources, pageSize), views.NewLiveNamespaces(ctx, dyn)
}

func TestLiveNamespaces(t *testing.T) {
	e := testEnv(t)
	if err := envtestutil.Apply(context.Background(), e.Client, newNamespace("live-ns", withLabels("team", "a"))); err != nil {
		t.Fatal(err)
	}
	counter := &envtestutil.RequestCounter{}
	_, namespaces := liveViews(t, counter, 0)
	cases := []struct {
		name   string
		labels map[string]string // nil: NotFound
	}{
		{"live-ns", map[string]string{"team": "a", "kubernetes.io/metadata.name": "live-ns"}},
		{"live-missing", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range 3 {
				got, err := namespaces.Get(c.name)
				if c.labels == nil {
					if _, ok := err.(apierrors.APIStatus); !ok || !apierrors.IsNotFound(err) { //nolint:errorlint // the namespace matcher type-asserts
						t.Fatalf("Get = %v, %v; want an unwrapped NotFound", got, err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if got.Name != c.name || !reflect.DeepEqual(got.Labels, c.labels) || got.ManagedFields != nil {
					t.Fatalf("Get = %s with labels %v and managed fields %v, want %s with labels %v", got.Name, got.Labels, got.ManagedFields, c.name, c.labels)
				}
			}
		})
	}
	if got := counter.Get("get", "namespaces"); got != len(cases) {
		t.Errorf("%d GETs of namespaces for %d namespaces read three times each, want one each", got, len(cases))
	}
}

// liveFixtures are the param objects of TestLiveParams, in namespaces whose names start with prefix.
func liveFixtures(prefix string) []*unstructured.Unstructured {
	a, b := prefix+"-a", prefix+"-b"
	objs := []*unstructured.Unstructured{newNamespace(a), newNamespace(b)}
	for i := range 5 {
		tier := "silver"
		if i%2 == 0 {
			tier = "gold"
		}
		objs = append(objs, newConfigMap(a, fmt.Sprintf("cm-%d", i), withLabels("tier", tier, "suite", prefix), withField("data.n", fmt.Sprint(i))))
	}
	objs = append(objs,
		newConfigMap(b, "cm-0", withLabels("tier", "gold", "suite", prefix)),
		newObject(clusterRoleKind, "", prefix+"-role", withLabels("suite", prefix)),
	)
	return objs
}

func TestLiveParams(t *testing.T) {
	e := testEnv(t)
	const prefix = "live"
	if err := envtestutil.Apply(context.Background(), e.Client, liveFixtures(prefix)...); err != nil {
		t.Fatal(err)
	}
	a, b := prefix+"-a", prefix+"-b"
	suite := labels.SelectorFromSet(labels.Set{"suite": prefix})
	gold := labels.SelectorFromSet(labels.Set{"suite": prefix, "tier": "gold"})
	unknown := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Unknown"}

	counter := &envtestutil.RequestCounter{}
	params, _ := liveViews(t, counter, 2)
	getCases := []struct {
		name                  string
		gvk                   schema.GroupVersionKind
		namespace, objectName string
		want                  string
		requests              int // GETs the first read makes
	}{
		{"by namespace and name", configMapKind, a, "cm-1", a + "/cm-1", 1},
		{"missing", configMapKind, a, "cm-9", "NotFound", 1},
		{"a namespaced object without its namespace", configMapKind, "", "cm-1", "NotFound", 0},
		{"cluster-scoped", clusterRoleKind, "", prefix + "-role", "/" + prefix + "-role", 1},
		{"cluster-scoped, asked in a namespace", clusterRoleKind, a, prefix + "-role", "NotFound", 0},
		{"a kind that is not served", unknown, a, "x", "NotFound", 0},
	}
	for _, c := range getCases {
		t.Run("Get "+c.name, func(t *testing.T) {
			before := counter.Get("get", "configmaps") + counter.Get("get", "clusterroles")
			for range 3 {
				o, err := params.Get(c.gvk, c.namespace, c.objectName)
				if o != nil && o.(*unstructured.Unstructured).GetManagedFields() != nil {
					t.Error("managed fields are kept")
				}
				if got := keys(objectList(o), err); got != c.want {
					t.Fatalf("Get = %s, want %s", got, c.want)
				}
			}
			if got := counter.Get("get", "configmaps") + counter.Get("get", "clusterroles") - before; got != c.requests {
				t.Errorf("%d GETs for three reads, want %d", got, c.requests)
			}
		})
	}
	listCases := []struct {
		name      string
		gvk       schema.GroupVersionKind
		namespace string
		selector  labels.Selector
		want      string
		pages     int // LISTs the first read makes, with 2 objects a page; -1 when other tests' objects count
	}{
		{"one namespace, nil selector, 3 pages", configMapKind, a, nil, a + "/cm-0 " + a + "/cm-1 " + a + "/cm-2 " + a + "/cm-3 " + a + "/cm-4", 3},
		{"one namespace, by label, 2 pages", configMapKind, a, gold, a + "/cm-0 " + a + "/cm-2 " + a + "/cm-4", 2},
		{"every namespace, by label", configMapKind, "", gold, a + "/cm-0 " + a + "/cm-2 " + a + "/cm-4 " + b + "/cm-0", -1},
		{"a namespace without objects", configMapKind, prefix + "-none", suite, "", 1},
		{"nothing", configMapKind, a, labels.Nothing(), "", 0},
		{"cluster-scoped", clusterRoleKind, "", suite, "/" + prefix + "-role", 1},
		{"cluster-scoped, in a namespace", clusterRoleKind, a, suite, "", 0},
		{"a kind that is not served", unknown, "", nil, "", 0},
	}
	for _, c := range listCases {
		t.Run("List "+c.name, func(t *testing.T) {
			lists := func() int { return counter.Get("list", "configmaps") + counter.Get("list", "clusterroles") }
			before := lists()
			first := 0
			for i := range 3 {
				if got := keys(params.List(c.gvk, c.namespace, c.selector)); got != c.want {
					t.Fatalf("List = %q, want %q", got, c.want)
				}
				if i == 0 {
					first = lists() - before
				}
			}
			if c.pages >= 0 && first != c.pages {
				t.Errorf("%d LISTs for the first read, want %d", first, c.pages)
			}
			if again := lists() - before - first; again != 0 {
				t.Errorf("%d LISTs for two more reads, want none", again)
			}
		})
	}

	t.Run("concurrent reads of one object make one request", func(t *testing.T) {
		counter := &envtestutil.RequestCounter{}
		params, _ := liveViews(t, counter, 0)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				if _, err := params.Get(configMapKind, b, "cm-0"); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if got := counter.GetIn("get", "configmaps", b); got != 1 {
			t.Errorf("%d GETs, want 1", got)
		}
	})

	t.Run("lists are in namespace/name order whatever the server's order", func(t *testing.T) {
		params, _ := liveViewsFor(t, reversedLists(e.Config, "configmaps"), 2)
		want := a + "/cm-0 " + a + "/cm-2 " + a + "/cm-4 " + b + "/cm-0"
		if got := keys(params.List(configMapKind, "", gold)); got != want {
			t.Errorf("List = %q, want %q", got, want)
		}
	})

	t.Run("a failed read is an error, not NotFound", func(t *testing.T) {
		failures := &envtestutil.ListFailures{Resource: "configmaps"}
		failures.SetMessage("etcd is unavailable")
		params, _ := liveViewsFor(t, failures.Wrap(e.Config), 0)
		objs, err := params.List(configMapKind, a, nil)
		if err == nil || apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "etcd is unavailable") {
			t.Errorf("List = %v, %v; want the server's error", objs, err)
		}
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// reversedLists returns a copy of cfg whose LIST responses for resource hold their items in reverse order,
// as an API server that does not sort them (an aggregated one) may answer.
func reversedLists(cfg *rest.Config, resource string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil || req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/"+resource) || resp.StatusCode != http.StatusOK {
				return resp, err
			}
			defer resp.Body.Close()
			var list map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
				return nil, err
			}
			items, _ := list["items"].([]any)
			slices.Reverse(items)
			body, err := json.Marshal(list)
			if err != nil {
				return nil, err
			}
			resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			resp.Header.Del("Content-Length")
			return resp, nil
		})
	})
	return cfg
}
