package controllers

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// failureCause is why a write to the API server failed, as far as what follows is concerned: each cause is
// logged once when it begins and once when it ends, however many writes fail meanwhile.
type failureCause string

// causeUnreachable is the cause of writes that never got an answer: the API server is down, restarting or
// cut off. Nothing but waiting helps, and its end is learned by asking the API server whether it is ready.
const causeUnreachable failureCause = "the API server is unreachable"

// causeOf classifies err. Connection errors, timeouts and 503s are causeUnreachable; an answer of the API
// server is its reason (Forbidden, TooManyRequests, ...); anything else is "other".
func causeOf(err error) failureCause {
	var netErr net.Error
	switch {
	case utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err),
		utilnet.IsHTTP2ConnectionLost(err), utilnet.IsTimeout(err), errors.As(err, &netErr),
		apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return causeUnreachable
	}
	if reason := apierrors.ReasonForError(err); reason != "" {
		return failureCause("the API server refuses: " + string(reason))
	}
	return "other"
}

// writeBackoff is the wait before the writes of one namespace are retried after failures failed attempts in
// a row: 1 s doubled for each further failure, at most 30 s. An API server that is down for a minute then
// sees each namespace's writes a handful of times, not sixty.
func writeBackoff(failures int) time.Duration {
	const first, most = time.Second, 30 * time.Second
	d := first
	for i := 1; i < failures && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

// apiFailures is what the operator knows of its failed writes to the API server, across every writer (the
// reports of each API). It logs each cause once when it begins, with its first error, and once when it ends,
// with how many writes failed and for how long: an API server that is down for a minute is two log lines,
// not one error with a stack trace per namespace each second. While the API server is unreachable it asks
// it whether it is ready, each ProbeInterval, so that the writes waiting for it go as soon as it is back
// rather than when their backoff ends; a write that succeeds ends every cause too.
type apiFailures struct {
	Log logr.Logger
	// Ready asks the API server whether it is ready (GET /readyz, which every client may read).
	Ready         func(ctx context.Context) error
	ProbeInterval time.Duration

	mu     sync.Mutex
	causes map[failureCause]*failureSpell
	// recovered are called, outside the lock, when the causes end: writers retry at once.
	recovered hooks
	// probe wakes the prober when the API server becomes unreachable.
	probe chan struct{}
}

// failureSpell is one cause's run of failures.
type failureSpell struct {
	since    time.Time
	failures int
}

func newAPIFailures(log logr.Logger, ready func(ctx context.Context) error) *apiFailures {
	return &apiFailures{Log: log, Ready: ready, ProbeInterval: time.Second, causes: map[failureCause]*failureSpell{},
		probe: make(chan struct{}, 1)}
}

// OnRecovered registers f to be called when writes may succeed again. f must not block.
func (f *apiFailures) OnRecovered(fn func()) {
	f.mu.Lock()
	f.recovered = append(f.recovered, fn)
	f.mu.Unlock()
}

// Failed records a failed write of what (e.g. "reports"), logging its cause if it is new, and returns the
// cause.
func (f *apiFailures) Failed(what string, err error) failureCause {
	cause := causeOf(err)
	f.mu.Lock()
	spell := f.causes[cause]
	isNew := spell == nil
	if isNew {
		spell = &failureSpell{since: time.Now()}
		f.causes[cause] = spell
	}
	spell.failures++
	f.mu.Unlock()
	if isNew {
		// Logged without a stack trace (see main.go): where a write failed is in the error; the trace would
		// only show the controller's goroutine.
		f.Log.Error(err, "Writes to the API server fail: retrying with backoff; logged again when they succeed",
			"cause", string(cause), "writing", what)
	}
	if cause == causeUnreachable {
		select {
		case f.probe <- struct{}{}:
		default:
		}
	}
	return cause
}

// Succeeded records that a write succeeded, which ends every cause: each is logged with the failures it
// made, and the writers waiting for their backoff retry at once.
func (f *apiFailures) Succeeded() {
	f.mu.Lock()
	if len(f.causes) == 0 {
		f.mu.Unlock()
		return
	}
	ended := f.causes
	f.causes = map[failureCause]*failureSpell{}
	calls := f.recovered
	f.mu.Unlock()
	for cause, spell := range ended {
		f.Log.Info("Writes to the API server succeed again", "cause", string(cause), "failedWrites", spell.failures,
			"for", time.Since(spell.since).Round(time.Second).String())
	}
	calls.run()
}

// unreachable reports whether writes currently fail because the API server is unreachable.
func (f *apiFailures) unreachable() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.causes[causeUnreachable] != nil
}

// Start asks the API server whether it is ready, each ProbeInterval while writes fail because it is
// unreachable, until it is or ctx ends. It runs on every replica: only the leader writes, and a replica that
// writes nothing is never woken.
func (f *apiFailures) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.probe:
		}
		f.waitReachable(ctx)
	}
}

// NeedLeaderElection is false: see Start.
func (f *apiFailures) NeedLeaderElection() bool { return false }

// waitReachable probes until the API server answers that it is ready, then ends the causes. It returns
// early when something else ended them (a write succeeded) or ctx ends.
func (f *apiFailures) waitReachable(ctx context.Context) {
	t := time.NewTicker(f.ProbeInterval)
	defer t.Stop()
	for f.unreachable() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, max(f.ProbeInterval, time.Second))
		err := f.Ready(pctx)
		cancel()
		if err == nil {
			f.Succeeded()
			return
		}
	}
}
