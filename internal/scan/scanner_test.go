package scan_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"

	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/test/envtestutil"
)

var (
	env        *envtestutil.Env
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

func TestMain(m *testing.M) {
	var err error
	env, err = envtestutil.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// keyPolicy fails config maps whose data has key "bad" set to "true"; it counts its evaluations.
type keyPolicy struct {
	name  string
	key   string
	calls atomic.Int64
}

func (p *keyPolicy) Key() audit.PolicyKey { return audit.PolicyKey{Source: "test", Name: p.name} }
func (p *keyPolicy) Resources() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{configMaps}
}
func (p *keyPolicy) Evaluate(_ context.Context, _ schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	p.calls.Add(1)
	v, _, _ := unstructured.NestedString(obj.Object, "data", p.key)
	r := audit.Result{Policy: p.name, Verdict: audit.Pass, Resource: audit.RefOf(obj)}
	if v == "true" {
		r.Verdict, r.Message = audit.Fail, p.key+" is set"
	}
	return []audit.Result{r}
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

func createConfigMap(t *testing.T, ns, name string, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

// current returns the results of namespace as the report reconciler reads them (NamespaceCounted). The tests'
// stores keep passes whole, so that every result names its object: passes that are only counted are an error.
func current(store *results.Store, ns string) ([]audit.Result, error) {
	res, passes := store.NamespaceCounted(ns)
	if len(passes) > 0 {
		return res, fmt.Errorf("passes only counted in %q, by object UID: %v", ns, passes)
	}
	return res, nil
}

// verdicts returns "policy name=verdict" for every result in namespace, sorted, or the error of current.
func verdicts(store *results.Store, ns string) string {
	res, err := current(store, ns)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, r := range res {
		out = append(out, fmt.Sprintf("%s %s=%s", r.Policy, r.Resource.Name, r.Verdict))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func expect(t *testing.T, store *results.Store, ns, want string) {
	t.Helper()
	envtestutil.Eventually(t, 20*time.Second, func() error {
		if got := verdicts(store, ns); got != want {
			return fmt.Errorf("results in %s:\n got %s\nwant %s", ns, got, want)
		}
		return nil
	})
}

func startScanner(t *testing.T, cfg *rest.Config, opts scan.Options) (*scan.Scanner, *results.Store) {
	t.Helper()
	return startScannerWith(t, cfg, opts, logr.Discard(), nil)
}

func waitSynced(t *testing.T, e *scan.Scanner) {
	t.Helper()
	envtestutil.Eventually(t, 20*time.Second, func() error {
		if !e.Synced() {
			return fmt.Errorf("scanner not synced")
		}
		return nil
	})
}

func TestScannerListsPagesAndFollowsChanges(t *testing.T) {
	createNamespace(t, "pages")
	for i := range 5 {
		createConfigMap(t, "pages", fmt.Sprintf("cm-%d", i), map[string]string{"bad": fmt.Sprint(i%2 == 0)})
	}
	counter := &envtestutil.RequestCounter{}
	scanner, store := startScanner(t, counter.Wrap(env.Config), scan.Options{PageSize: 2})
	p := &keyPolicy{name: "bad", key: "bad"}
	scanner.SetPolicy(p)
	waitSynced(t, scanner)
	expect(t, store, "pages", "bad cm-0=fail,bad cm-1=pass,bad cm-2=fail,bad cm-3=pass,bad cm-4=fail")
	// Every config map of the cluster is read in pages of two, and no object is fetched on its own.
	if lists, gets := counter.Get("list", "configmaps"), counter.Get("get", "configmaps"); lists < 3 || gets != 0 {
		t.Fatalf("want >= 3 paginated lists and no gets, got %d lists, %d gets", lists, gets)
	}

	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), keyOf("pages", "cm-1"), cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["bad"] = "true"
	if err := env.Client.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "pages", Name: "cm-0"}}); err != nil {
		t.Fatal(err)
	}
	expect(t, store, "pages", "bad cm-1=fail,bad cm-2=fail,bad cm-3=pass,bad cm-4=fail")

	scanner.RemovePolicy(p.Key())
	expect(t, store, "pages", "")
}

func TestScannerPolicyChangeEvaluatesOnlyThatPolicy(t *testing.T) {
	createNamespace(t, "change")
	for i := range 4 {
		createConfigMap(t, "change", fmt.Sprintf("cm-%d", i), map[string]string{"a": "true", "b": fmt.Sprint(i == 0)})
	}
	scanner, store := startScanner(t, env.Config, scan.Options{})
	pa, pb := &keyPolicy{name: "a", key: "a"}, &keyPolicy{name: "b", key: "b"}
	scanner.SetPolicy(pa)
	scanner.SetPolicy(pb)
	waitSynced(t, scanner)
	expect(t, store, "change", "a cm-0=fail,a cm-1=fail,a cm-2=fail,a cm-3=fail,b cm-0=fail,b cm-1=pass,b cm-2=pass,b cm-3=pass")

	aCalls := pa.calls.Load()
	pb2 := &keyPolicy{name: "b", key: "a"} // the same policy, edited: it now checks key a
	scanner.SetPolicy(pb2)
	waitSynced(t, scanner)
	expect(t, store, "change", "a cm-0=fail,a cm-1=fail,a cm-2=fail,a cm-3=fail,b cm-0=fail,b cm-1=fail,b cm-2=fail,b cm-3=fail")
	if got := pa.calls.Load(); got != aCalls {
		t.Fatalf("editing policy b re-evaluated policy a %d times on unchanged objects", got-aCalls)
	}
	if pb2.calls.Load() < 4 {
		t.Fatalf("edited policy evaluated %d times, want at least once per object", pb2.calls.Load())
	}
}

// expiringTransport, once armed, answers the next watch of config maps itself: the stream stays silent (so
// changes made meanwhile are not seen through it) until release, then says 410 Gone, as the API server does
// when a watch's resourceVersion has been compacted away.
type expiringTransport struct {
	rt      http.RoundTripper
	armed   atomic.Bool
	served  atomic.Int64
	release chan struct{}
}

func (e *expiringTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") == "true" && strings.HasSuffix(req.URL.Path, "/configmaps") && e.armed.CompareAndSwap(true, false) {
		pr, pw := io.Pipe()
		go func() {
			<-e.release
			_, _ = pw.Write([]byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}}` + "\n"))
			_ = pw.Close()
		}()
		e.served.Add(1)
		return &http.Response{
			StatusCode: http.StatusOK,
			Header:     http.Header{"Content-Type": []string{"application/json"}},
			Body:       pr,
			Request:    req,
		}, nil
	}
	return e.rt.RoundTrip(req)
}

func TestScannerRelistsAfterWatchExpiry(t *testing.T) {
	createNamespace(t, "expiry")
	for i := range 3 {
		createConfigMap(t, "expiry", fmt.Sprintf("cm-%d", i), map[string]string{"bad": fmt.Sprint(i == 1)})
	}
	exp := &expiringTransport{release: make(chan struct{})}
	counter := &envtestutil.RequestCounter{}
	cfg := counter.Wrap(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { exp.rt = rt; return exp })
	// Short watches, so that the armed transport answers the next one soon.
	scanner, store := startScanner(t, cfg, scan.Options{Backoff: 100 * time.Millisecond, WatchTimeout: time.Second})
	p := &keyPolicy{name: "bad", key: "bad"}
	scanner.SetPolicy(p)
	waitSynced(t, scanner)
	expect(t, store, "expiry", "bad cm-0=pass,bad cm-1=fail,bad cm-2=pass")

	exp.armed.Store(true)
	envtestutil.Eventually(t, 10*time.Second, func() error {
		if exp.served.Load() == 0 {
			return fmt.Errorf("the scanner has not started a new watch yet")
		}
		return nil
	})
	// Changes the scanner cannot see through its (silent) watch: only the relist can find them.
	before := counter.Get("list", "configmaps")
	calls := p.calls.Load()
	if err := env.Client.Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "expiry", Name: "cm-2"}}); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, "expiry", "cm-3", map[string]string{"bad": "true"})
	close(exp.release)

	expect(t, store, "expiry", "bad cm-0=pass,bad cm-1=fail,bad cm-3=fail")
	if counter.Get("list", "configmaps") <= before {
		t.Fatal("no relist after the watch expired")
	}
	// Only the new object is evaluated: unchanged objects keep their results, nothing is duplicated.
	if got := p.calls.Load() - calls; got != 1 {
		t.Fatalf("relist evaluated %d objects, want 1 (the new one)", got)
	}
	if res, err := current(store, "expiry"); err != nil || len(res) != 3 {
		t.Fatalf("got %d results (%v), want 3", len(res), err)
	}
}

func TestScannerReportsUnreadableResource(t *testing.T) {
	user, err := env.AddUser(envtest.User{Name: "no-rights"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	scanner, store := startScanner(t, user.Config(), scan.Options{Backoff: 100 * time.Millisecond})
	scanner.SetPolicy(&keyPolicy{name: "bad", key: "bad"})
	waitSynced(t, scanner) // an unreadable resource must not hold back the reports
	var got []audit.Result
	envtestutil.Eventually(t, 10*time.Second, func() error {
		var err error
		if got, err = current(store, ""); err != nil {
			return err
		}
		if len(got) != 1 {
			return fmt.Errorf("want one cluster-level result, got %v", got)
		}
		return nil
	})
	r := got[0]
	if r.Verdict != audit.Error || !strings.Contains(r.Message, "cannot read v1/configmaps") || !strings.Contains(r.Message, "forbidden") {
		t.Fatalf("unexpected result %+v", r)
	}
}

func keyOf(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// heldPolicy passes every object, but its first evaluation waits until released: a policy change can be
// made while it is under way.
type heldPolicy struct {
	keyPolicy
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (p *heldPolicy) Evaluate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	first := false
	p.once.Do(func() { first = true })
	if first {
		close(p.started)
		<-p.release
	}
	return p.keyPolicy.Evaluate(ctx, gvr, obj)
}

// A policy removed while one of its evaluations is under way gets no results from it: its results were
// deleted with it, and the evaluation finishing later must not bring them back.
func TestScannerDropsResultsOfRemovedPolicy(t *testing.T) {
	createNamespace(t, "removed")
	createConfigMap(t, "removed", "cm", map[string]string{"x": "true"})
	scanner, store := startScanner(t, env.Config, scan.Options{})
	held := &heldPolicy{keyPolicy: keyPolicy{name: "held", key: "x"}, started: make(chan struct{}), release: make(chan struct{})}
	scanner.SetPolicy(held)
	select {
	case <-held.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the policy was never evaluated")
	}
	scanner.RemovePolicy(held.Key())
	close(held.release)
	// The evaluation has finished once the scanner is synced; a second policy proves results still flow.
	other := &keyPolicy{name: "other", key: "x"}
	scanner.SetPolicy(other)
	waitSynced(t, scanner)
	expect(t, store, "removed", "other cm=fail")
}
