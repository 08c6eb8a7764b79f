package scan_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// heldList, once armed, holds the next LIST of config maps until release gets a value or the request is
// cancelled, and tells held when it does. It tells secretsWatched when a WATCH of secrets starts, which a
// watcher does once its read has ended.
type heldList struct {
	rt             http.RoundTripper
	armed          atomic.Bool
	held           chan struct{}
	release        chan struct{}
	secretsWatched chan struct{}
}

func (h *heldList) RoundTrip(req *http.Request) (*http.Response, error) {
	watch := req.URL.Query().Get("watch") == "true"
	if watch && strings.HasSuffix(req.URL.Path, "/secrets") {
		select {
		case h.secretsWatched <- struct{}{}:
		default:
		}
	}
	if !watch && strings.HasSuffix(req.URL.Path, "/configmaps") && h.armed.CompareAndSwap(true, false) {
		h.held <- struct{}{}
		select {
		case <-h.release:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return h.rt.RoundTrip(req)
}

// secretsPolicy covers secrets and finds nothing.
type secretsPolicy struct{}

func (secretsPolicy) Key() audit.PolicyKey { return audit.PolicyKey{Source: "test", Name: "secrets"} }
func (secretsPolicy) Resources() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{secrets}
}
func (secretsPolicy) Evaluate(context.Context, schema.GroupVersionResource, *unstructured.Unstructured) []audit.Result {
	return nil
}

// settlings records the calls of Options.OnSettled, and whether the scanner was synced at each.
type settlings struct {
	mu     sync.Mutex
	synced []bool
}

func (s *settlings) calls() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.synced...)
}

// waitCalls waits until OnSettled has been called more than n times, and fails the test if a call found the
// scanner not synced.
func (s *settlings) waitCalls(t *testing.T, n int) {
	t.Helper()
	envtestutil.Eventually(t, 10*time.Second, func() error {
		if got := len(s.calls()); got <= n {
			return fmt.Errorf("OnSettled called %d times, want more than %d", got, n)
		}
		return nil
	})
	if got := s.calls(); slices.Contains(got, false) {
		t.Fatalf("OnSettled called while the scanner was not synced: %v", got)
	}
}

// wait waits until the armed LIST is held, and returns how often OnSettled was called before: it cannot be
// called while that read is under way.
func (h *heldList) wait(t *testing.T, e *scan.Scanner, s *settlings) int {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("no LIST of config maps")
	}
	if e.Synced() {
		t.Fatal("the scanner is synced while a read is under way")
	}
	return len(s.calls())
}

// The scanner says when it goes from busy to synced: a read ends, or the watcher of a read under way stops,
// and no watcher is busy any more; never while a read is under way. OnSettled is called without the scanner's
// locks held: it asks the scanner whether it is synced.
func TestScannerTellsWhenItSettles(t *testing.T) {
	createNamespace(t, "settles")
	createConfigMap(t, "settles", "cm", map[string]string{"bad": "true"})
	hold := &heldList{held: make(chan struct{}, 1), release: make(chan struct{}, 1), secretsWatched: make(chan struct{}, 1)}
	cfg := *env.Config
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { hold.rt = rt; return hold })
	var (
		settled settlings
		scanner *scan.Scanner
		ready   = make(chan struct{})
	)
	onSettled := func() {
		<-ready
		synced := make(chan bool, 1)
		go func() { synced <- scanner.Synced() }()
		select {
		case s := <-synced:
			settled.mu.Lock()
			settled.synced = append(settled.synced, s)
			settled.mu.Unlock()
		case <-time.After(5 * time.Second):
			t.Error("Synced blocked when called from OnSettled: it is called under the scanner's lock")
		}
	}
	scanner, _ = startScanner(t, &cfg, scan.Options{OnSettled: onSettled})
	close(ready)
	p := &keyPolicy{name: "bad", key: "bad"}

	// The first read, of two resources: the read of secrets ends while that of config maps is under way.
	hold.armed.Store(true)
	scanner.SetPolicy(p)
	if n := hold.wait(t, scanner, &settled); n != 0 {
		t.Fatalf("OnSettled called %d times before any read ended", n)
	}
	scanner.SetPolicy(secretsPolicy{})
	select {
	case <-hold.secretsWatched:
	case <-time.After(10 * time.Second):
		t.Fatal("secrets are not watched: their read has not ended")
	}
	if got := settled.calls(); len(got) != 0 || scanner.Synced() {
		t.Fatalf("while the read of config maps is under way: synced %v, OnSettled called %d times", scanner.Synced(), len(got))
	}
	hold.release <- struct{}{}
	settled.waitCalls(t, 0)

	// A rescan: it ends the same way.
	hold.armed.Store(true)
	scanner.Rescan(p.Key(), "")
	n := hold.wait(t, scanner, &settled)
	hold.release <- struct{}{}
	settled.waitCalls(t, n)

	// The policy goes while a rescan is under way: its watcher stops, and nothing else is busy.
	hold.armed.Store(true)
	scanner.Rescan(p.Key(), "")
	n = hold.wait(t, scanner, &settled)
	scanner.RemovePolicy(p.Key())
	settled.waitCalls(t, n)
}
