package fence

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// clock is a settable clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// fakeLock is a lock whose writes take a while on the clock and may fail.
type fakeLock struct {
	resourcelock.Interface // nil: only the methods below are called
	clock                  *clock
	takes                  time.Duration
	fail                   error
}

func (l *fakeLock) Identity() string { return "me" }

func (l *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	l.clock.advance(l.takes)
	return l.fail
}

func (l *fakeLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.Update(ctx, rec)
}

// sent is a transport that records the requests it is given and the deadlines of their contexts.
type sent struct {
	requests  []string
	deadlines []time.Time
}

func (s *sent) RoundTrip(req *http.Request) (*http.Response, error) {
	s.requests = append(s.requests, req.Method+" "+req.URL.Path)
	d, _ := req.Context().Deadline()
	s.deadlines = append(s.deadlines, d)
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(""))}, nil
}

func record(holder string, leaseSeconds int) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: leaseSeconds}
}

func TestFence(t *testing.T) {
	const (
		report = "/apis/wgpolicyk8s.io/v1alpha2/namespaces/a/policyreports/r"
		review = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
	)
	start := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	type step func(c *clock, l *Lock, f *fakeLock)
	renew := func(takes time.Duration, leaseSeconds int, fail error) step {
		return func(c *clock, l *Lock, f *fakeLock) {
			f.takes, f.fail = takes, fail
			if err := l.Update(context.Background(), record("me", leaseSeconds)); !errors.Is(err, fail) {
				t.Fatalf("Update returned %v, want %v", err, fail)
			}
		}
	}
	release := func(fail error) step {
		return func(c *clock, l *Lock, f *fakeLock) {
			f.takes, f.fail = 0, fail
			_ = l.Update(context.Background(), record("", 1))
		}
	}
	wait := func(d time.Duration) step { return func(c *clock, _ *Lock, _ *fakeLock) { c.advance(d) } }
	cases := []struct {
		name   string
		steps  []step
		method string
		path   string
		// sentDeadline is the context deadline the request is sent with; zero: it is refused.
		sentDeadline time.Time
	}{
		{name: "never acquired: a write is refused", method: http.MethodPut, path: report},
		{name: "never acquired: a read goes through", method: http.MethodGet, path: report},
		{name: "never acquired: a review goes through", method: http.MethodPost, path: review},
		{name: "acquired by a create", method: http.MethodPost, path: report,
			steps: []step{func(c *clock, l *Lock, f *fakeLock) {
				if err := l.Create(context.Background(), record("me", 15)); err != nil {
					t.Fatal(err)
				}
			}},
			sentDeadline: start.Add(10 * time.Second)},
		{name: "renewed: a write is sent with the validity as its deadline", method: http.MethodPatch, path: report,
			steps: []step{renew(0, 15, nil), wait(9 * time.Second)}, sentDeadline: start.Add(10 * time.Second)},
		{name: "validity over: a delete is refused", method: http.MethodDelete, path: report,
			steps: []step{renew(0, 15, nil), wait(10 * time.Second)}},
		{name: "validity counts from the start of a slow renewal", method: http.MethodPost, path: report,
			steps: []step{renew(4*time.Second, 15, nil), wait(6 * time.Second)}},
		{name: "a failed renewal does not extend", method: http.MethodPost, path: report,
			steps: []step{renew(0, 15, nil), wait(8 * time.Second), renew(time.Second, 15, errors.New("conflict")), wait(time.Second)}},
		{name: "a later renewal extends", method: http.MethodPost, path: report,
			steps:        []step{renew(0, 15, nil), wait(8 * time.Second), renew(time.Second, 15, nil), wait(time.Second)},
			sentDeadline: start.Add(18 * time.Second)},
		{name: "a lease shorter than the validity bounds it", method: http.MethodPost, path: report,
			steps: []step{renew(0, 4, nil), wait(3 * time.Second)}, sentDeadline: start.Add(4 * time.Second)},
		{name: "a release closes the fence even when it fails", method: http.MethodPost, path: report,
			steps: []step{renew(0, 15, nil), release(errors.New("timeout"))}},
		{name: "after a release, reads go on", method: http.MethodGet, path: report,
			steps: []step{renew(0, 15, nil), release(nil)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: start}
			f := New(10*time.Second, c.now)
			fl := &fakeLock{clock: c}
			l := &Lock{Interface: fl, Fence: f}
			for _, s := range tc.steps {
				s(c, l, fl)
			}
			tr := &sent{}
			req, err := http.NewRequest(tc.method, "https://api"+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := f.RoundTripper(tr).RoundTrip(req)
			if resp != nil {
				_ = resp.Body.Close()
			}
			mutating := tc.method != http.MethodGet && tc.path != review
			switch {
			case mutating && tc.sentDeadline.IsZero():
				if !errors.Is(err, ErrNotHeld) || len(tr.requests) != 0 {
					t.Fatalf("got error %v and sent %v, want ErrNotHeld and nothing sent", err, tr.requests)
				}
			case err != nil || len(tr.requests) != 1:
				t.Fatalf("got error %v and sent %v, want the request sent", err, tr.requests)
			case !tr.deadlines[0].Equal(tc.sentDeadline):
				t.Fatalf("sent with deadline %v, want %v", tr.deadlines[0], tc.sentDeadline)
			}
		})
	}
}

// Exempt resources are written while the lease is not held, in a namespace or not; others are still refused.
func TestExempt(t *testing.T) {
	f := New(10*time.Second, time.Now)
	f.Exempt(schema.GroupResource{Group: "wgpolicyk8s.io", Resource: "policyreports"},
		schema.GroupResource{Group: "wgpolicyk8s.io", Resource: "clusterpolicyreports"},
		schema.GroupResource{Resource: "events"})
	for _, tc := range []struct {
		method, path string
		sent         bool
	}{
		{http.MethodPut, "/apis/wgpolicyk8s.io/v1alpha2/namespaces/a/policyreports/r", true},
		{http.MethodPost, "/apis/wgpolicyk8s.io/v1alpha2/namespaces/a/policyreports", true},
		{http.MethodDelete, "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports/celaudit", true},
		{http.MethodPost, "/api/v1/namespaces/a/events", true},
		{http.MethodPost, "/api/v1/namespaces/a/configmaps", false},
		{http.MethodPut, "/apis/audit.celaudit.io/v1alpha1/auditpolicies/p/status", false},
		{http.MethodPatch, "/api/v1/namespaces/events", false}, // the namespace named events
	} {
		tr := &sent{}
		req, err := http.NewRequest(tc.method, "https://api"+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := f.RoundTripper(tr).RoundTrip(req)
		if resp != nil {
			_ = resp.Body.Close()
		}
		if got := err == nil && len(tr.requests) == 1; got != tc.sent {
			t.Errorf("%s %s: sent %v (error %v), want sent %v", tc.method, tc.path, got, err, tc.sent)
		}
	}
}
