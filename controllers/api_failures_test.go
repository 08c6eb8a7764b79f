package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestCauseOf(t *testing.T) {
	refused := &url.Error{Op: "Post", URL: "https://10.0.0.1/apis", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{}}}
	gr := schema.GroupResource{Group: "wgpolicyk8s.io", Resource: "policyreports"}
	for _, tc := range []struct {
		name string
		err  error
		want failureCause
	}{
		{"connection refused", fmt.Errorf("writing reports: %w", syscall.ECONNREFUSED), causeUnreachable},
		{"transport error", refused, causeUnreachable},
		{"connection reset", syscall.ECONNRESET, causeUnreachable},
		{"unexpected EOF", io.ErrUnexpectedEOF, causeUnreachable},
		{"503", apierrors.NewServiceUnavailable("shutting down"), causeUnreachable},
		{"server timeout", apierrors.NewServerTimeout(gr, "create", 1), causeUnreachable},
		{"joined with a refusal", errors.Join(syscall.ECONNREFUSED, syscall.ECONNREFUSED), causeUnreachable},
		{"forbidden", apierrors.NewForbidden(gr, "r", errors.New("no")), "the API server refuses: Forbidden"},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), "the API server refuses: TooManyRequests"},
		{"anything else", errors.New("encoding failed"), "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := causeOf(tc.err); got != tc.want {
				t.Errorf("causeOf(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

func TestWriteBackoff(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		30 * time.Second, 30 * time.Second}
	for i, w := range want {
		if got := writeBackoff(i + 1); got != w {
			t.Errorf("writeBackoff(%d) = %s, want %s", i+1, got, w)
		}
	}
	if got := writeBackoff(1000); got != 30*time.Second {
		t.Errorf("writeBackoff(1000) = %s, want 30s", got)
	}
}

// Failures of one cause are logged once when they begin and once when a write succeeds, with their count;
// the writers are told then, and not before.
func TestAPIFailuresLogOncePerCause(t *testing.T) {
	var (
		mu    sync.Mutex
		lines []string
	)
	log := funcr.New(func(_, args string) { mu.Lock(); lines = append(lines, args); mu.Unlock() }, funcr.Options{})
	f := newAPIFailures(log, nil)
	recovered := 0
	f.OnRecovered(func() { recovered++ })
	for range 50 {
		f.Failed("reports", syscall.ECONNREFUSED)
	}
	f.Failed("reports", apierrors.NewForbidden(schema.GroupResource{Resource: "policyreports"}, "r", errors.New("no")))
	if recovered != 0 {
		t.Errorf("the writers were told the API server is back while writes still fail")
	}
	f.Succeeded()
	f.Succeeded() // nothing left to end
	if recovered != 1 {
		t.Errorf("the writers were told %d times that writes succeed again, want once", recovered)
	}
	want := []string{
		`"msg"="Writes to the API server fail: retrying with backoff; logged again when they succeed" "error"="connection refused" "cause"="the API server is unreachable" "writing"="reports"`,
		`"msg"="Writes to the API server fail: retrying with backoff; logged again when they succeed" "error"="policyreports \"r\" is forbidden: no" "cause"="the API server refuses: Forbidden" "writing"="reports"`,
		`"level"=0 "msg"="Writes to the API server succeed again" "cause"="the API server is unreachable" "writing"="reports" "failedWrites"=50`,
		`"level"=0 "msg"="Writes to the API server succeed again" "cause"="the API server refuses: Forbidden" "writing"="reports" "failedWrites"=1`,
	}
	if len(lines) != len(want) {
		t.Fatalf("logged %d lines, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, w := range want[:2] {
		if lines[i] != w {
			t.Errorf("line %d = %s\nwant %s", i, lines[i], w)
		}
	}
	// The ends of causes come in no particular order.
	ends := strings.Join(lines[2:], "\n")
	for _, w := range want[2:] {
		if !strings.Contains(ends, w) {
			t.Errorf("no line starts with %s in:\n%s", w, ends)
		}
	}
}

// While the API server is unreachable, the probe asks it whether it is ready until it is, then ends the
// failures: the writers retry at once.
func TestAPIFailuresProbeEndsUnreachable(t *testing.T) {
	var ready sync.Mutex
	ready.Lock() // the API server is down until unlocked
	probes := make(chan struct{}, 100)
	f := newAPIFailures(funcr.New(func(_, _ string) {}, funcr.Options{}), func(context.Context) error {
		probes <- struct{}{}
		if !ready.TryLock() {
			return syscall.ECONNREFUSED
		}
		return nil
	})
	f.ProbeInterval = 10 * time.Millisecond
	recovered := make(chan struct{})
	f.OnRecovered(func() { close(recovered) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = f.Start(ctx) }()

	f.Failed("reports", syscall.ECONNREFUSED)
	for range 3 {
		<-probes // asked, and refused, three times
	}
	select {
	case <-recovered:
		t.Fatal("the writers were told the API server is back while it refuses connections")
	default:
	}
	ready.Unlock()
	select {
	case <-recovered:
	case <-time.After(time.Minute):
		t.Fatal("the writers were not told the API server is back")
	}
}

// stepReconciler fails each reconcile with the next error of errs, nil once they are used up.
type stepReconciler struct{ errs []error }

func (s *stepReconciler) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	if len(s.errs) == 0 {
		return reconcile.Result{}, nil
	}
	err := s.errs[0]
	s.errs = s.errs[1:]
	return reconcile.Result{}, err
}

// A reconciler whose writes fail because the API server is unreachable retries with a growing backoff, not
// with the error; a success resets the backoff; an error that is not an API failure is returned.
func TestBackingOff(t *testing.T) {
	refused := fmt.Errorf("updating status: %w", syscall.ECONNREFUSED)
	bug := errors.New("no such field")
	inner := &stepReconciler{errs: []error{refused, refused, refused, nil, refused, bug}}
	b := &backingOff{TypedReconciler: inner, Failures: newAPIFailures(funcr.New(func(_, _ string) {}, funcr.Options{}), nil),
		What: "AuditPolicies"}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}}
	for i, want := range []struct {
		after time.Duration
		err   error
	}{{time.Second, nil}, {2 * time.Second, nil}, {4 * time.Second, nil}, {0, nil}, {time.Second, nil}, {0, bug}} {
		res, err := b.Reconcile(context.Background(), req)
		if res.RequeueAfter != want.after || !errors.Is(err, want.err) || (want.err == nil && err != nil) {
			t.Errorf("reconcile %d = %+v, %v; want RequeueAfter %s, error %v", i+1, res, err, want.after, want.err)
		}
	}
}

// When the API server answers again, the requests waiting for their backoff are enqueued at once, and their
// backoff starts again from its first step; requests that did not fail are not enqueued.
func TestBackingOffRetriesAtOnceOnRecovery(t *testing.T) {
	refused := fmt.Errorf("updating status: %w", syscall.ECONNREFUSED)
	failures := newAPIFailures(funcr.New(func(_, _ string) {}, funcr.Options{}), nil)
	inner := &stepReconciler{errs: []error{refused, refused, refused, refused, refused}}
	b := newBackingOff(inner, failures, "AuditPolicies")
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.Source().Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}}
	for range 4 {
		if _, err := b.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if q.Len() != 0 {
		t.Fatalf("%d requests queued while the API server is unreachable, want none", q.Len())
	}

	failures.Succeeded() // the API server answers again

	if q.Len() != 1 {
		t.Fatalf("%d requests queued once the API server answers again, want 1 (p)", q.Len())
	}
	got, _ := q.Get()
	q.Done(got)
	if got != req {
		t.Errorf("queued %v, want %v", got, req)
	}
	res, err := b.Reconcile(ctx, req)
	if err != nil || res.RequeueAfter != time.Second {
		t.Errorf("the first failure after the recovery = %+v, %v; want RequeueAfter 1s", res, err)
	}
}
