package scan_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// startScannerWith starts an scanner that logs to log and waits between retries with sleep (nil: the real wait).
func startScannerWith(t *testing.T, cfg *rest.Config, opts scan.Options, log logr.Logger, sleep func(context.Context, time.Duration)) (*scan.Scanner, *results.Store) {
	t.Helper()
	// Whole passes, so that results name their objects.
	store := results.NewStore(nil, results.KeepPasses(true))
	opts.Released = true
	client, err := scan.NewClient(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	scanner := scan.NewScanner(client, store, log, opts)
	if sleep != nil {
		scan.SetSleep(scanner, sleep)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = scanner.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return scanner, store
}

// TestScannerBacksOffUnreadableResource reads a resource the scanner may not list: each retry waits twice as long
// as the one before, up to MaxBackoff, so the LISTs of a resource that stays unreadable grow logarithmically.
func TestScannerBacksOffUnreadableResource(t *testing.T) {
	user, err := env.AddUser(envtest.User{Name: "backoff-no-rights"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		waits []time.Duration
	)
	// Waits are recorded rather than slept, so the test sees the whole schedule at once.
	record := func(ctx context.Context, d time.Duration) {
		mu.Lock()
		waits = append(waits, d)
		n := len(waits)
		mu.Unlock()
		if n >= 8 {
			<-ctx.Done() // enough seen: no further LISTs
		}
	}
	counter := &envtestutil.RequestCounter{}
	scanner, _ := startScannerWith(t, counter.Wrap(user.Config()),
		scan.Options{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second}, logr.Discard(), record)
	scanner.SetPolicy(&keyPolicy{name: "bad", key: "bad"})
	envtestutil.Eventually(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(waits) < 8 {
			return fmt.Errorf("%d retries so far", len(waits))
		}
		return nil
	})
	mu.Lock()
	got := slices.Clone(waits[:8])
	mu.Unlock()
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second, time.Second, time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("waits between retries = %v, want %v", got, want)
	}
	if lists := counter.StatusIn("list", "configmaps", "", http.StatusForbidden); lists != 8 {
		t.Fatalf("%d forbidden LISTs for 8 retries", lists)
	}
}

// TestForbiddenReadNamesTheGrant reads a resource the scanner's user may not list: the error result and the
// OnReadError error say which verbs on which resource of which API group are missing and how to grant them,
// then the API server's own message.
func TestForbiddenReadNamesTheGrant(t *testing.T) {
	user, err := env.AddUser(envtest.User{Name: "forbidden-grant"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const cause = `forbidden: missing permission to list and watch "configmaps" in the core API group (""); ` +
		`grant it this way (configmaps is forbidden: User "forbidden-grant" cannot list resource "configmaps" ` +
		`in API group "" at the cluster scope)`
	var (
		mu        sync.Mutex
		callbacks []string
	)
	opts := scan.Options{Backoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, ForbiddenHint: "grant it this way"}
	opts.OnReadError = func(_ schema.GroupVersionResource, _ []audit.PolicyKey, err error) {
		mu.Lock()
		defer mu.Unlock()
		callbacks = append(callbacks, err.Error())
	}
	scanner, store := startScannerWith(t, user.Config(), opts, logr.Discard(), nil)
	scanner.SetPolicy(&keyPolicy{name: "bad", key: "bad"})
	envtestutil.Eventually(t, 20*time.Second, func() error {
		got, err := current(store, "")
		if err != nil {
			return err
		}
		if want := "cannot read v1/configmaps: " + cause; len(got) != 1 || got[0].Verdict != audit.Error || got[0].Message != want {
			return fmt.Errorf("cluster-level results %+v, want one error %q", got, want)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(callbacks, []string{cause}) {
		t.Errorf("OnReadError errors %q, want once %q", callbacks, cause)
	}
}

// TestScannerKeepsReadErrorCurrent changes the cause of a failing LIST: the error result, the log and the
// callback follow each change once, not each retry, and everything clears when the resource can be read.
func TestScannerKeepsReadErrorCurrent(t *testing.T) {
	createNamespace(t, "read-error")
	createConfigMap(t, "read-error", "cm", map[string]string{"bad": "true"})
	ft := &envtestutil.ListFailures{Resource: "configmaps"}
	ft.SetMessage("backend one is down")
	cfg := ft.Wrap(env.Config)

	var (
		mu        sync.Mutex
		logLines  []string
		callbacks []string
	)
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logLines = append(logLines, args)
	}, funcr.Options{})
	opts := scan.Options{Backoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	opts.OnReadError = func(gvr schema.GroupVersionResource, policies []audit.PolicyKey, err error) {
		mu.Lock()
		defer mu.Unlock()
		msg := "readable"
		if err != nil {
			msg = err.Error()
		}
		callbacks = append(callbacks, fmt.Sprintf("%s %v %s", gvr.Resource, policies, msg))
	}
	scanner, store := startScannerWith(t, cfg, opts, log, nil)
	scanner.SetPolicy(&keyPolicy{name: "bad", key: "bad"})

	errorResult := func(want string) func() error {
		return func() error {
			got, err := current(store, "")
			if err != nil {
				return err
			}
			if len(got) != 1 || got[0].Verdict != audit.Error || got[0].Message != want {
				return fmt.Errorf("cluster-level results %+v, want one error %q", got, want)
			}
			return nil
		}
	}
	envtestutil.Eventually(t, 10*time.Second, errorResult("cannot read v1/configmaps: backend one is down"))
	// Several retries with the same cause.
	base := ft.Failed()
	envtestutil.Eventually(t, 10*time.Second, func() error {
		if ft.Failed() < base+3 {
			return fmt.Errorf("%d retries", ft.Failed()-base)
		}
		return nil
	})
	ft.SetMessage("backend two is down")
	envtestutil.Eventually(t, 10*time.Second, errorResult("cannot read v1/configmaps: backend two is down"))
	base = ft.Failed()
	envtestutil.Eventually(t, 10*time.Second, func() error {
		if ft.Failed() < base+3 {
			return fmt.Errorf("%d retries", ft.Failed()-base)
		}
		return nil
	})
	ft.SetMessage("")
	envtestutil.Eventually(t, 10*time.Second, func() error {
		got, err := current(store, "")
		if err != nil {
			return err
		}
		if len(got) != 0 {
			return fmt.Errorf("cluster-level results remain: %+v", got)
		}
		if got := verdicts(store, "read-error"); got != "bad cm=fail" {
			return fmt.Errorf("results in read-error: %s", got)
		}
		return nil
	})

	mu.Lock()
	defer mu.Unlock()
	wantCallbacks := []string{
		"configmaps [test/bad] backend one is down",
		"configmaps [test/bad] backend two is down",
		"configmaps [test/bad] readable",
	}
	if !slices.Equal(callbacks, wantCallbacks) {
		t.Errorf("OnReadError calls:\n got %q\nwant %q", callbacks, wantCallbacks)
	}
	var cannotRead []string
	for _, l := range logLines {
		if strings.Contains(l, "Cannot read the resource") || strings.Contains(l, "can be read again") {
			cannotRead = append(cannotRead, l)
		}
	}
	if len(cannotRead) != 3 || !strings.Contains(cannotRead[0], "backend one") || !strings.Contains(cannotRead[1], "backend two") {
		t.Errorf("want one default-level log line per change of the read error, got %q", cannotRead)
	}
}

// namespacedPolicy evaluates Namespaces, config maps and cluster roles, and counts its evaluations by object.
type namespacedPolicy struct {
	mu    sync.Mutex
	calls map[string]int
}

var (
	namespacesGVR   = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	clusterRolesGVR = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
)

func (p *namespacedPolicy) Key() audit.PolicyKey {
	return audit.PolicyKey{Source: "test", Name: "scoped"}
}
func (p *namespacedPolicy) Resources() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{namespacesGVR, configMaps, clusterRolesGVR}
}
func (p *namespacedPolicy) Evaluate(_ context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	p.mu.Lock()
	p.calls[gvr.Resource+" "+obj.GetNamespace()+"/"+obj.GetName()]++
	p.mu.Unlock()
	return []audit.Result{{Policy: "scoped", Verdict: audit.Pass, Resource: audit.RefOf(obj)}}
}

func (p *namespacedPolicy) count(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key]
}

// TestScannerRescanOfOneNamespace rescans a policy within one namespace, as a namespace relabel does: the
// objects in the namespace and that Namespace itself are evaluated again; nothing lists a cluster-scoped
// resource under the namespace, and other cluster-scoped objects are left alone.
func TestScannerRescanOfOneNamespace(t *testing.T) {
	createNamespace(t, "rescan-one")
	createConfigMap(t, "rescan-one", "cm", nil)
	counter := &envtestutil.RequestCounter{}
	scope := map[schema.GroupVersionResource]bool{configMaps: true, clusterRolesGVR: false}
	scanner, _ := startScanner(t, counter.Wrap(env.Config), scan.Options{
		Namespaced: func(gvr schema.GroupVersionResource) (bool, bool) { n, ok := scope[gvr]; return n, ok },
	})
	p := &namespacedPolicy{calls: map[string]int{}}
	scanner.SetPolicy(p)
	waitSynced(t, scanner)
	nsKey, cmKey := "namespaces /rescan-one", "configmaps rescan-one/cm"
	if p.count(nsKey) != 1 || p.count(cmKey) != 1 {
		t.Fatalf("first read: evaluations %v", p.calls)
	}
	roleLists := counter.Get("list", "clusterroles")

	scanner.Rescan(p.Key(), "rescan-one")
	envtestutil.Eventually(t, 10*time.Second, func() error {
		if p.count(nsKey) != 2 || p.count(cmKey) != 2 {
			return fmt.Errorf("namespace evaluated %d times, config map %d times, want 2 each", p.count(nsKey), p.count(cmKey))
		}
		return nil
	})
	waitSynced(t, scanner)
	if n := counter.GetIn("list", "namespaces", "rescan-one"); n != 0 {
		t.Errorf("%d LISTs of namespaces within namespace rescan-one", n)
	}
	if n := counter.Get("list", "clusterroles"); n != roleLists {
		t.Errorf("cluster roles listed again (%d LISTs after %d) for a change of one namespace", n, roleLists)
	}
	if n := p.count("namespaces /default"); n != 1 {
		t.Errorf("namespace default evaluated %d times, want once", n)
	}
}
