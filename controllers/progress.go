package controllers

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// auditProgress answers how far the audit has got: whether it is settled, and whether the first audit is
// done. Its questions change nothing. The end of the first audit (and its duration metric) is recorded when
// the notifier's Recheck says that the audit may have settled: the scanner settled, or the start-up gate opened.
type auditProgress struct {
	startup interface{ Open() bool }
	scan    interface{ Synced() bool }
	// started is when the first audit began; firstAudit receives its duration.
	started    time.Time
	firstAudit prometheus.Gauge
	now        func() time.Time
	// audited is set once the audit has been seen settled.
	audited atomic.Bool
}

// newAuditProgress returns the progress of the audit run by the scanner, released by the start-up gate, that
// began at started. Each Recheck of notifier records the first audit's end once it is settled.
func newAuditProgress(startup interface{ Open() bool }, scan interface{ Synced() bool }, notifier *Notifier,
	started time.Time, firstAudit prometheus.Gauge) *auditProgress {
	p := &auditProgress{startup: startup, scan: scan, started: started, firstAudit: firstAudit, now: time.Now}
	notifier.OnRecheck(p.recheck)
	return p
}

// Settled reports whether every policy the cluster held at start-up is registered and the scanner has read
// everything they cover, with no rescan pending.
func (p *auditProgress) Settled() bool { return p.startup.Open() && p.scan.Synced() }

// FirstAuditDone reports whether the first audit is done: the audit was settled once. Only the first audit
// holds reports back: later rescans (a policy edit, a resync) update results in place, and holding every
// namespace's writes until they finish would delay unrelated changes. Settled answers for the moment between
// the audit settling and the Recheck that records it.
func (p *auditProgress) FirstAuditDone() bool { return p.audited.Load() || p.Settled() }

// recheck records the end of the first audit, and its duration, the first time the audit is settled.
func (p *auditProgress) recheck() {
	if p.audited.Load() || !p.Settled() {
		return
	}
	if p.audited.CompareAndSwap(false, true) {
		p.firstAudit.Set(p.now().Sub(p.started).Seconds())
	}
}
