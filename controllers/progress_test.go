package controllers

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/celaudit/celaudit/internal/audit"
)

// fakeScan is a scan whose synced state the test sets.
type fakeScan struct{ synced bool }

func (s *fakeScan) Synced() bool { return s.synced }

// TestAuditProgress drives the start-up gate, the scan and the notifier's Rechecks through a start-up and a
// rescan, and checks after each step what the progress answers and the first audit's duration metric.
func TestAuditProgress(t *testing.T) {
	type step struct {
		name string
		// do changes the state; recheck then calls the notifier's Recheck, as the scan and the gate do.
		do                    func(gate *startupGate, scan *fakeScan)
		recheck               bool
		wantSettled, wantDone bool
		wantSeconds           float64
	}
	open := func(gate *startupGate, _ *fakeScan) { gate.Listed(audit.SourceCRD, nil) }
	sync := func(_ *startupGate, scan *fakeScan) { scan.synced = true }
	rescan := func(_ *startupGate, scan *fakeScan) { scan.synced = false }
	cases := []struct {
		name  string
		steps []step
	}{{
		name: "the scan settles after the gate opens",
		steps: []step{
			{name: "start"},
			{name: "gate opens", do: open, recheck: true},
			{name: "scan synced, not yet told", do: sync, wantSettled: true, wantDone: true},
			{name: "scan settles", recheck: true, wantSettled: true, wantDone: true, wantSeconds: 3},
			{name: "a rescan begins", do: rescan, wantDone: true, wantSeconds: 3},
			{name: "the rescan settles", do: sync, recheck: true, wantSettled: true, wantDone: true, wantSeconds: 3},
		},
	}, {
		name: "the gate opens on a synced scan (no policy covers any resource)",
		steps: []step{
			{name: "scan synced", do: sync, recheck: true},
			{name: "gate opens", do: open, recheck: true, wantSettled: true, wantDone: true, wantSeconds: 3},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gate, scan, notifier := newStartupGate(audit.SourceCRD), &fakeScan{}, NewNotifier()
			gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "first_audit_seconds"})
			start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			p := newAuditProgress(gate, scan, notifier, start, gauge)
			p.now = func() time.Time { return start.Add(3 * time.Second) }
			for _, s := range tc.steps {
				if s.do != nil {
					s.do(gate, scan)
				}
				if s.recheck {
					notifier.Recheck()
				}
				for range 3 { // asking, however often, changes nothing
					if got := p.Settled(); got != s.wantSettled {
						t.Fatalf("%s: Settled() = %t, want %t", s.name, got, s.wantSettled)
					}
					if got := p.FirstAuditDone(); got != s.wantDone {
						t.Fatalf("%s: FirstAuditDone() = %t, want %t", s.name, got, s.wantDone)
					}
				}
				if got := testutil.ToFloat64(gauge); got != s.wantSeconds {
					t.Fatalf("%s: first audit duration %v s, want %v s", s.name, got, s.wantSeconds)
				}
			}
		})
	}
}
