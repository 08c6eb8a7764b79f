package scan_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/listjson"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// countingClient counts the LIST requests it starts and can fail some of them.
type countingClient struct {
	scan.Client
	lists atomic.Int64
	fail  func(n int64) error
}

func (c *countingClient) List(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (*listjson.Page, error) {
	n := c.lists.Add(1)
	if c.fail != nil {
		if err := c.fail(n); err != nil {
			return nil, err
		}
	}
	return c.Client.List(ctx, gvr, ns, opts)
}

// gatePolicy passes every config map; its first evaluation waits until ready returns true or a timeout
// passes, and records which came first.
type gatePolicy struct {
	ready   func() bool
	once    sync.Once
	waited  chan struct{}
	readyOK atomic.Bool
	calls   atomic.Int64
}

func (p *gatePolicy) Key() audit.PolicyKey { return audit.PolicyKey{Source: "test", Name: "gate"} }
func (p *gatePolicy) Resources() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{configMaps}
}
func (p *gatePolicy) Evaluate(_ context.Context, _ schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	p.calls.Add(1)
	p.once.Do(func() {
		defer close(p.waited)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if p.ready() {
				p.readyOK.Store(true)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	return []audit.Result{{Policy: "gate", Verdict: audit.Pass, Resource: audit.RefOf(obj)}}
}

func newScanClient(t *testing.T) scan.Client {
	t.Helper()
	c, err := scan.NewClient(env.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runScanner starts an scanner with policy p and returns it with a function that stops it and waits for it.
func runScanner(t *testing.T, client scan.Client, p audit.Policy, opts scan.Options) (*scan.Scanner, func()) {
	t.Helper()
	opts.Released = true
	e := scan.NewScanner(client, results.NewStore(nil), logr.Discard(), opts)
	e.SetPolicy(p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Start(ctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return e, stop
}

func createPrefetchObjects(t *testing.T, ns string) {
	t.Helper()
	createNamespace(t, ns)
	for i := range 6 {
		createConfigMap(t, ns, fmt.Sprintf("cm-%d", i), map[string]string{"k": "v"})
	}
}

// The next page is requested while the current one is evaluated, so that the API server and the workers
// work at the same time.
func TestListRequestsNextPageWhileEvaluating(t *testing.T) {
	createPrefetchObjects(t, "prefetch")
	client := &countingClient{Client: newScanClient(t)}
	p := &gatePolicy{waited: make(chan struct{})}
	p.ready = func() bool { return client.lists.Load() >= 2 }
	e, _ := runScanner(t, client, p, scan.Options{PageSize: 2, Workers: 1})
	select {
	case <-p.waited:
	case <-time.After(30 * time.Second):
		t.Fatal("no object was evaluated")
	}
	if !p.readyOK.Load() {
		t.Fatal("the next page was not requested while the first was evaluated (waited 10 s)")
	}
	waitSynced(t, e)
	if held := scan.PagesHeld(e); held != 0 {
		t.Fatalf("%d page tokens held after the list", held)
	}
}

// A page that cannot be read, a retry, and a stop in the middle of a list give back every page token.
func TestListReturnsPageTokens(t *testing.T) {
	createPrefetchObjects(t, "prefetch-tokens")
	client := &countingClient{Client: newScanClient(t)}
	// The second request is the page read ahead: it fails once, the list starts over after the backoff.
	client.fail = func(n int64) error {
		if n == 2 {
			return apierrors.NewInternalError(fmt.Errorf("injected"))
		}
		return nil
	}
	p := &keyPolicy{name: "tokens", key: "k"}
	e, _ := runScanner(t, client, p, scan.Options{PageSize: 2, PagesInFlight: 2, Backoff: 10 * time.Millisecond})
	waitSynced(t, e)
	envtestutil.Eventually(t, 10*time.Second, func() error {
		if held := scan.PagesHeld(e); held != 0 {
			return fmt.Errorf("%d page tokens held after the list", held)
		}
		return nil
	})
	if n := client.lists.Load(); n < 4 {
		t.Fatalf("want the list to start over after the failed page, got %d LIST requests", n)
	}

	// Stopped while its first page is evaluated and the next is read ahead.
	blocked := &gatePolicy{waited: make(chan struct{})}
	var stopping atomic.Bool
	blocked.ready = stopping.Load
	e2, stop := runScanner(t, &countingClient{Client: newScanClient(t)}, blocked, scan.Options{PageSize: 2, PagesInFlight: 2})
	envtestutil.Eventually(t, 10*time.Second, func() error {
		if blocked.calls.Load() == 0 {
			return fmt.Errorf("not evaluating yet")
		}
		return nil
	})
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	stopping.Store(true)
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the scanner did not stop")
	}
	if held := scan.PagesHeld(e2); held != 0 {
		t.Fatalf("%d page tokens held after the scanner stopped", held)
	}
}
