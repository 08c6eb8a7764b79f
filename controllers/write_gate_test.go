package controllers

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/report"
)

func TestDecideWrite(t *testing.T) {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	lim := writeLimits{coalesce: time.Second, maxHold: 10 * time.Second}
	// The cache holds report "a" at resourceVersion 4.
	cached := report.Reports{PolicyReports: []v1alpha2.PolicyReport{{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "4"}}}}
	// Writes that ended d ago: "a" updated to resourceVersion rv.
	wroteA := func(rv string, d time.Duration) *expectation {
		return &expectation{since: ago(d), reports: map[string]string{"a": rv}}
	}
	type state = namespaceState
	for _, tc := range []struct {
		name          string
		st            namespaceState
		notAudited    bool // the first audit is not done
		rescanning    bool
		wantWait      wait
		wantAfter     time.Duration
		wantEventOnly bool // no timer: only an event ends the wait
	}{
		// The first audit.
		{name: "first audit under way", st: state{dirtySince: ago(time.Minute)}, notAudited: true,
			wantWait: waitFirstAudit, wantEventOnly: true},
		{name: "first audit under way, every other gate closed too",
			st:         state{lastWrite: ago(100 * time.Millisecond), dirtySince: ago(time.Second), expected: wroteA("5", time.Second)},
			notAudited: true, rescanning: true, wantWait: waitFirstAudit, wantEventOnly: true},

		// Failed writes back off.
		{name: "failed writes, backoff running", st: state{dirtySince: ago(3 * time.Second), retryAt: now.Add(4 * time.Second)},
			wantWait: waitBackoff, wantAfter: 4 * time.Second},
		{name: "failed writes, backoff over", st: state{dirtySince: ago(3 * time.Second), retryAt: now}, wantWait: writeNow},
		{name: "failed writes, backoff before the first audit", st: state{retryAt: now.Add(time.Second)}, notAudited: true,
			wantWait: waitFirstAudit, wantEventOnly: true},

		// Nothing holds the write.
		{name: "never written", st: state{dirtySince: now}, wantWait: writeNow},
		{name: "nothing kept", wantWait: writeNow},

		// Coalescing.
		{name: "written within Coalesce", st: state{lastWrite: ago(400 * time.Millisecond), dirtySince: now},
			wantWait: waitCoalesce, wantAfter: 600 * time.Millisecond},
		{name: "written just under Coalesce ago", st: state{lastWrite: ago(999 * time.Millisecond), dirtySince: now},
			wantWait: waitCoalesce, wantAfter: time.Millisecond},
		{name: "written Coalesce ago", st: state{lastWrite: ago(time.Second), dirtySince: now}, wantWait: writeNow},
		{name: "written long ago", st: state{lastWrite: ago(time.Hour), dirtySince: now}, wantWait: writeNow},
		{name: "coalescing during a rescan", st: state{lastWrite: ago(300 * time.Millisecond), dirtySince: ago(5 * time.Second)},
			rescanning: true, wantWait: waitCoalesce, wantAfter: 700 * time.Millisecond},
		{name: "coalescing while the cache lags", st: state{lastWrite: ago(300 * time.Millisecond), dirtySince: now, expected: wroteA("5", 200*time.Millisecond)},
			wantWait: waitCoalesce, wantAfter: 700 * time.Millisecond},

		// A rescan.
		{name: "rescan, changed 3s ago", st: state{lastWrite: ago(time.Hour), dirtySince: ago(3 * time.Second)}, rescanning: true,
			wantWait: waitRescan, wantAfter: 7 * time.Second},
		{name: "rescan, never written", st: state{dirtySince: now}, rescanning: true,
			wantWait: waitRescan, wantAfter: 10 * time.Second},
		{name: "rescan, changed MaxHold ago", st: state{dirtySince: ago(10 * time.Second)}, rescanning: true, wantWait: writeNow},
		{name: "rescan, nothing changed", st: state{lastWrite: ago(time.Hour)}, rescanning: true, wantWait: writeNow},
		{name: "rescan while the cache lags", st: state{dirtySince: ago(2 * time.Second), expected: wroteA("5", 9*time.Second)},
			rescanning: true, wantWait: waitRescan, wantAfter: 8 * time.Second},
		{name: "rescan past MaxHold while the cache lags", st: state{dirtySince: ago(12 * time.Second), expected: wroteA("5", 4*time.Second)},
			rescanning: true, wantWait: waitCache, wantAfter: 6 * time.Second},

		// The cache.
		{name: "cache lags behind an update", st: state{lastWrite: ago(2 * time.Second), dirtySince: now, expected: wroteA("5", 2*time.Second)},
			wantWait: waitCache, wantAfter: 8 * time.Second},
		{name: "cache shows the update", st: state{dirtySince: now, expected: wroteA("4", 2*time.Second)}, wantWait: writeNow},
		{name: "cache shows a later version", st: state{dirtySince: now, expected: wroteA("3", 2*time.Second)}, wantWait: writeNow},
		{name: "cache lags MaxHold after the writes", st: state{dirtySince: now, expected: wroteA("5", 10*time.Second)}, wantWait: writeNow},
		{name: "cache still holds a deleted report", st: state{dirtySince: now, expected: wroteA("", time.Second)},
			wantWait: waitCache, wantAfter: 9 * time.Second},
		{name: "cache shows a report created", st: state{dirtySince: now, expected: &expectation{since: ago(time.Second), reports: map[string]string{"b": ""}}},
			wantWait: writeNow},
		{name: "writes that wrote nothing", st: state{dirtySince: now, expected: &expectation{since: now, reports: map[string]string{}}}, wantWait: writeNow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := writeInputs{now: now, existing: cached, firstAuditDone: !tc.notAudited, rescanning: tc.rescanning}
			got := decideWrite(tc.st, in, lim)
			if got.wait != tc.wantWait || got.after != tc.wantAfter {
				t.Fatalf("decideWrite = %s after %s, want %s after %s", got.wait, got.after, tc.wantWait, tc.wantAfter)
			}
			if tc.wantEventOnly && got.after != 0 {
				t.Fatalf("waiting for %s looks again after %s: only an event ends that wait", got.wait, got.after)
			}
		})
	}
}

// The gate records what happened; deciding records nothing.
func TestWriteGateRecords(t *testing.T) {
	start := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	lim := writeLimits{coalesce: time.Second, maxHold: 10 * time.Second}
	in := func(at time.Duration, rescanning bool) writeInputs {
		return writeInputs{now: start.Add(at), firstAuditDone: true, rescanning: rescanning}
	}
	var g writeGate
	if d := g.decide("ns", in(0, true), lim); d.wait != writeNow {
		t.Fatalf("a namespace never marked dirty waits for %s", d.wait)
	}
	if g.namespaces["ns"] != nil {
		t.Fatal("deciding created the namespace's state")
	}

	g.markDirty("ns", start)
	g.markDirty("ns", start.Add(4*time.Second)) // dirty since the first change
	g.markDirty("other", start.Add(time.Second))
	if got := g.dirty(); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"ns", "other"}) {
		t.Fatalf("dirty = %v, want ns and other", got)
	}
	for range 2 {
		if d := g.decide("ns", in(6*time.Second, true), lim); d.wait != waitRescan || d.after != 4*time.Second {
			t.Fatalf("during a rescan 6s after the first change: %s after %s, want rescan after 4s", d.wait, d.after)
		}
	}

	g.wrote("ns", start.Add(7*time.Second))
	if got := g.dirty(); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("dirty after writing ns = %v, want other", got)
	}
	g.expect("ns", &expectation{since: start.Add(8 * time.Second), reports: map[string]string{"a": "5"}}, true)
	if d := g.decide("ns", in(7500*time.Millisecond, false), lim); d.wait != waitCoalesce || d.after != 500*time.Millisecond {
		t.Fatalf("0.5s after the write: %s after %s, want coalescing after 0.5s", d.wait, d.after)
	}
	if d := g.decide("ns", in(9*time.Second, false), lim); d.wait != waitCache || d.after != 9*time.Second {
		t.Fatalf("1s after the writes ended: %s after %s, want cache after 9s", d.wait, d.after)
	}
	g.upToDate("ns")
	if d := g.decide("ns", in(9*time.Second, false), lim); d.wait != writeNow {
		t.Fatalf("after the reports were found up to date: waiting for %s", d.wait)
	}

	g.forget("other")
	if got := g.dirty(); len(got) != 0 {
		t.Fatalf("dirty after forgetting other = %v, want none", got)
	}
}
