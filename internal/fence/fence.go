package fence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrNotHeld is the error of a write refused because the lease may no longer be held.
var ErrNotHeld = errors.New("the leader lease may no longer be held: write refused without being sent")

// Fence says whether writes may be sent: until the validity has passed since the last successful renewal of
// the lease began. It is closed until the lease is first acquired.
type Fence struct {
	validity time.Duration
	now      func() time.Time

	mu sync.Mutex
	// renewed is when the last successful renewal began, zero when the lease is not held. It carries both
	// clocks: the monotonic one keeps a wall-clock step back from reopening the fence, the wall clock counts
	// time the monotonic one may not (a suspended machine), so the fence closes when either says so.
	renewed time.Time
	// lease is the lease duration the last renewal recorded; the fence never outlasts it.
	lease time.Duration

	// exempt are the resources whose writes pass while the fence is closed (see Exempt); set before use.
	exempt map[schema.GroupResource]bool
}

// Exempt lets writes of resources through whether or not the lease is held: the writes every member of a
// sharded deployment makes under another guarantee than the lease (its reports, guarded by their epoch and
// resourceVersion; its Events). It is called before the fence is used.
func (f *Fence) Exempt(resources ...schema.GroupResource) {
	if f.exempt == nil {
		f.exempt = map[schema.GroupResource]bool{}
	}
	for _, gr := range resources {
		f.exempt[gr] = true
	}
}

// New returns a closed fence whose writes are allowed for validity after each successful renewal began. now
// is the clock (time.Now in production).
func New(validity time.Duration, now func() time.Time) *Fence {
	return &Fence{validity: validity, now: now}
}

// renewedAt records a successful renewal that began at start, for a lease of duration lease.
func (f *Fence) renewedAt(start time.Time, lease time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if start.After(f.renewed) {
		f.renewed, f.lease = start, lease
	}
}

// close closes the fence until the next successful renewal: the lease is being released.
func (f *Fence) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewed, f.lease = time.Time{}, 0
}

// Deadline returns the moment writes stop being allowed, and whether that moment is still ahead.
func (f *Fence) Deadline() (time.Time, bool) {
	f.mu.Lock()
	renewed, valid := f.renewed, min(f.validity, f.lease)
	f.mu.Unlock()
	if renewed.IsZero() {
		return time.Time{}, false
	}
	now := f.now()
	left := min(renewed.Add(valid).Sub(now), renewed.Round(0).Add(valid).Sub(now.Round(0)))
	if left <= 0 {
		return renewed.Add(valid), false
	}
	return now.Add(left), true
}

// Wrap returns a copy of cfg whose mutating requests pass the fence.
func (f *Fence) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(f.RoundTripper)
	return cfg
}

// RoundTripper returns rt behind the fence: a mutating request is refused with ErrNotHeld while the fence is
// closed, and otherwise sent with the fence's deadline as its context deadline. Reads, and the reviews that
// store nothing (authentication.k8s.io, authorization.k8s.io), always go through: a standby reads, and
// celaudit learns who it is before it leads.
func (f *Fence) RoundTripper(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if !writes(req) || f.exempt[resourceOf(req.URL.Path)] {
			return rt.RoundTrip(req)
		}
		deadline, open := f.Deadline()
		if !open {
			return nil, f.refusal(req, deadline)
		}
		ctx, cancel := context.WithDeadline(req.Context(), deadline)
		resp, err := rt.RoundTrip(req.WithContext(ctx))
		if err != nil || resp == nil || resp.Body == nil {
			cancel()
			return resp, err
		}
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		return resp, nil
	})
}

// refusal is the error of a refused request; deadline is zero when the lease is not held at all.
func (f *Fence) refusal(req *http.Request, deadline time.Time) error {
	if deadline.IsZero() {
		return fmt.Errorf("%s %s: %w (the lease is not held)", req.Method, req.URL.Path, ErrNotHeld)
	}
	return fmt.Errorf("%s %s: %w (the last renewal's validity ended %s ago)", req.Method, req.URL.Path, ErrNotHeld,
		f.now().Sub(deadline).Round(time.Millisecond))
}

// writes reports whether req may change what the API server stores.
func writes(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	for _, group := range []string{"/apis/authentication.k8s.io/", "/apis/authorization.k8s.io/"} {
		if strings.HasPrefix(req.URL.Path, group) {
			return false
		}
	}
	return true
}

// resourceOf returns the group and resource of a request's path (/api/v1/... or /apis/group/version/...),
// zero for other paths.
func resourceOf(path string) schema.GroupResource {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var gr schema.GroupResource
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gr.Group, parts = parts[1], parts[3:]
	default:
		return schema.GroupResource{}
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	gr.Resource = parts[0]
	return gr
}

// Lock is a leader-election lock that tells the fence of each successful acquisition or renewal, and closes
// it before the lease is released.
type Lock struct {
	resourcelock.Interface
	Fence *Fence
}

var _ resourcelock.Interface = &Lock{}

// Create creates the lease, which acquires it.
func (l *Lock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, rec, l.Interface.Create)
}

// Update renews, acquires or releases the lease.
func (l *Lock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, rec, l.Interface.Update)
}

// write makes the lock write rec and tells the fence. Errors are returned as the lock made them: the elector
// tells a conflict from other failures.
func (l *Lock) write(ctx context.Context, rec resourcelock.LeaderElectionRecord,
	do func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	if rec.HolderIdentity != l.Identity() {
		l.Fence.close()
		return do(ctx, rec)
	}
	start := l.Fence.now()
	if err := do(ctx, rec); err != nil {
		return err
	}
	l.Fence.renewedAt(start, time.Duration(rec.LeaseDurationSeconds)*time.Second)
	return nil
}

// cancelOnClose cancels a request's context once its answer has been read.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
