package controllers

import (
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/celaudit/celaudit/internal/report"
)

// writeGate keeps what the report reconciler knows about each namespace's report writes, and decides from it
// when they are written. decideWrite answers that question and changes nothing; the other methods record
// what happened: a namespace's results changed, its reports were written, the cache is expected to show them.
type writeGate struct {
	mu         sync.Mutex
	namespaces map[string]*namespaceState // by namespace ("" for the cluster)
}

// namespaceState is what the reconciler keeps about one namespace's report writes.
type namespaceState struct {
	lastWrite  time.Time    // zero: never written
	dirtySince time.Time    // zero: nothing to write
	expected   *expectation // the writes the cache has not shown yet; nil: none. Replaced, never modified.
	// taken holds the report names found held by reports celaudit does not own.
	taken sets.Set[string]
	// conflictSince is when writes began to be refused as conflicting with the reports the API server holds;
	// zero: the last writes were not.
	conflictSince time.Time
	// removed holds the result timestamps of the namespace's reports deleted since its last write, by result
	// ID: a report deleted by hand is written again with the times its results last changed, not the time
	// it is written again.
	removed map[string]metav1.Timestamp
	// failures counts the writes that failed in a row (see ReportReconciler.retryLater), and retryAt is when
	// they are retried; zero: the last writes did not fail, or the API server is known to be back.
	failures int
	retryAt  time.Time
}

// expectation is what a namespace's last writes left: each report written, with the resourceVersion the API
// server returned ("" for a report deleted). A reconcile that runs before the cache shows them would build
// its changes against reports that are no longer there, and create again what it just created.
type expectation struct {
	since   time.Time
	reports map[string]string
}

// writeLimits are the report reconciler's settings that bound how long writes wait.
type writeLimits struct {
	// coalesce is the least time between two writes of a namespace's reports.
	coalesce time.Duration
	// maxHold bounds the wait for a rescan to end, counted from the change, and the wait for the cache to
	// show the last writes, counted from their end.
	maxHold time.Duration
}

// writeInputs are what, besides a namespace's state, decides whether its reports are written now.
type writeInputs struct {
	now time.Time
	// existing are the namespace's reports as the cache holds them.
	existing report.Reports
	// firstAuditDone is set once the results reflect the whole cluster.
	firstAuditDone bool
	// rescanning is set while a rescan is under way.
	rescanning bool
}

// wait names what a namespace's report writes wait for.
type wait int

const (
	// writeNow: nothing; the reports are written now.
	writeNow wait = iota
	// waitFirstAudit: the first audit to complete, which enqueues every namespace marked dirty.
	waitFirstAudit
	// waitCoalesce: Coalesce to pass since the last write.
	waitCoalesce
	// waitRescan: the rescan to settle, which enqueues every namespace marked dirty, or MaxHold to pass since
	// the namespace was marked dirty.
	waitRescan
	// waitCache: the cache to show the last writes, whose watch events enqueue the namespace, or MaxHold to
	// pass since they ended.
	waitCache
	// waitBackoff: the backoff after failed writes to pass, or the API server to be back (which clears it
	// and enqueues every namespace marked dirty).
	waitBackoff
)

func (w wait) String() string {
	switch w {
	case writeNow:
		return "nothing"
	case waitFirstAudit:
		return "first audit"
	case waitCoalesce:
		return "coalescing"
	case waitRescan:
		return "rescan"
	case waitCache:
		return "cache"
	case waitBackoff:
		return "backoff"
	}
	return "unknown"
}

// writeDecision is whether a namespace's reports are written now, and if not, what they wait for.
type writeDecision struct {
	wait wait
	// after is when to look again though nothing else happened: the time left of Coalesce, or until MaxHold
	// ends the wait for a rescan or the cache. Zero: only an event ends the wait.
	after time.Duration
}

// decideWrite decides whether the reports of a namespace in state st are written now. The first audit comes
// first: nothing is published before it completes. Then writes are kept Coalesce apart, wait for a rescan to
// end (up to MaxHold after the change, so that a policy edit lands in one complete write per report) and for
// the cache to show the last writes (up to MaxHold after them: a report changed by someone else meanwhile
// may never show the version written).
func decideWrite(st namespaceState, in writeInputs, lim writeLimits) writeDecision {
	if !in.firstAuditDone {
		return writeDecision{wait: waitFirstAudit}
	}
	if left := st.retryAt.Sub(in.now); !st.retryAt.IsZero() && left > 0 {
		return writeDecision{wait: waitBackoff, after: left}
	}
	if !st.lastWrite.IsZero() {
		if left := st.lastWrite.Add(lim.coalesce).Sub(in.now); left > 0 {
			return writeDecision{wait: waitCoalesce, after: left}
		}
	}
	if in.rescanning && !st.dirtySince.IsZero() {
		if left := st.dirtySince.Add(lim.maxHold).Sub(in.now); left > 0 {
			return writeDecision{wait: waitRescan, after: left}
		}
	}
	if st.expected != nil {
		left := st.expected.since.Add(lim.maxHold).Sub(in.now)
		if left > 0 && !cacheShows(in.existing, st.expected.reports) {
			return writeDecision{wait: waitCache, after: left}
		}
	}
	return writeDecision{wait: writeNow}
}

// cacheShows reports whether existing holds every report of want at least at the resourceVersion written,
// and none of those deleted ("").
func cacheShows(existing report.Reports, want map[string]string) bool {
	have := make(map[string]string, len(existing.PolicyReports)+len(existing.ClusterPolicyReports))
	for i := range existing.PolicyReports {
		have[existing.PolicyReports[i].Name] = existing.PolicyReports[i].ResourceVersion
	}
	for i := range existing.ClusterPolicyReports {
		have[existing.ClusterPolicyReports[i].Name] = existing.ClusterPolicyReports[i].ResourceVersion
	}
	for name, rv := range want {
		got, present := have[name]
		switch {
		case rv == "":
			if present {
				return false
			}
		case !present || !notOlder(got, rv):
			return false
		}
	}
	return true
}

// notOlder reports whether resourceVersion got is the same as or later than want. Resource versions are
// compared as numbers when both are (as etcd's are), otherwise only for equality.
func notOlder(got, want string) bool {
	g, errG := strconv.ParseUint(got, 10, 64)
	w, errW := strconv.ParseUint(want, 10, 64)
	if errG != nil || errW != nil {
		return got == want
	}
	return g >= w
}

// decide decides, from what is kept about namespace and in, whether its reports are written now.
func (g *writeGate) decide(namespace string, in writeInputs, lim writeLimits) writeDecision {
	g.mu.Lock()
	var st namespaceState
	if s := g.namespaces[namespace]; s != nil {
		// Only what decideWrite reads, so that it runs without the lock.
		st = namespaceState{lastWrite: s.lastWrite, dirtySince: s.dirtySince, expected: s.expected, retryAt: s.retryAt}
	}
	g.mu.Unlock()
	return decideWrite(st, in, lim)
}

// markDirty records that namespace's reports may no longer hold its results, as of now.
func (g *writeGate) markDirty(namespace string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st := g.state(namespace); st.dirtySince.IsZero() {
		st.dirtySince = now
	}
}

// dirty returns the namespaces marked dirty and not written since: those whose writes may wait for the first
// audit or a rescan to complete.
func (g *writeGate) dirty() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for ns, st := range g.namespaces {
		if !st.dirtySince.IsZero() {
			out = append(out, ns)
		}
	}
	return out
}

// wrote records that namespace's reports are being written, at now, with its current results.
func (g *writeGate) wrote(namespace string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state(namespace)
	st.lastWrite = now
	st.dirtySince = time.Time{}
}

// expect records the writes the cache is expected to show next; ok tells whether every write succeeded.
func (g *writeGate) expect(namespace string, exp *expectation, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state(namespace)
	st.expected = exp
	if ok {
		st.conflictSince = time.Time{}
	}
}

// failed records that writing namespace's reports failed at now: they are still to be written, after the
// backoff of the failures in a row, which it returns.
func (g *writeGate) failed(namespace string, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state(namespace)
	st.failures++
	wait := writeBackoff(st.failures)
	st.retryAt = now.Add(wait)
	if st.dirtySince.IsZero() {
		st.dirtySince = now
	}
	return wait
}

// succeeded records that writing namespace's reports succeeded: the next failure backs off from the start.
func (g *writeGate) succeeded(namespace string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st := g.namespaces[namespace]; st != nil {
		st.failures, st.retryAt = 0, time.Time{}
	}
}

// clearBackoff lets every namespace whose writes failed be written at once: the API server is back.
func (g *writeGate) clearBackoff() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, st := range g.namespaces {
		st.retryAt = time.Time{}
	}
}

// upToDate records that namespace's reports hold its results.
func (g *writeGate) upToDate(namespace string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state(namespace)
	st.dirtySince = time.Time{}
	st.expected = nil // the cache shows the last writes, or MaxHold passed
	st.conflictSince = time.Time{}
	st.removed = nil // what the reports hold is current: the results of reports deleted before are gone
}

// published records that namespace's reports were written: the timestamps of reports deleted before are
// in them now, or belong to results that are gone.
func (g *writeGate) published(namespace string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state(namespace).removed = nil
}

// keepRemoved keeps timestamps, those of the results of a report of namespace that was deleted, until the
// namespace's reports are written again.
func (g *writeGate) keepRemoved(namespace string, timestamps map[string]metav1.Timestamp) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state(namespace)
	st.removed = addMissing(st.removed, timestamps)
}

// previousTimestamps returns the timestamps of the results of existing, namespace's reports, and of those
// its reports deleted since the last write held.
func (g *writeGate) previousTimestamps(namespace string, existing report.Reports) map[string]metav1.Timestamp {
	previous := report.PreviousTimestamps(existing)
	g.mu.Lock()
	defer g.mu.Unlock()
	return addMissing(previous, g.state(namespace).removed)
}

// takeName records that a report celaudit does not own holds name in namespace. It returns the names to
// avoid there, with those of taken, and whether name was already known.
func (g *writeGate) takeName(namespace, name string, taken sets.Set[string]) (avoided sets.Set[string], known bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state(namespace)
	if st.taken.Has(name) {
		return nil, true
	}
	if st.taken == nil {
		st.taken = sets.New[string]()
	}
	st.taken.Insert(name)
	return st.taken.Union(taken), false
}

// takenIn returns the names found taken in namespace, as TakenNames expects them.
func (g *writeGate) takenIn(namespace string) map[string]sets.Set[string] {
	g.mu.Lock()
	defer g.mu.Unlock()
	return map[string]sets.Set[string]{namespace: g.state(namespace).taken.Clone()}
}

// conflicting records that writes of namespace's reports were refused as conflicting, at now, and returns
// since when they have been.
func (g *writeGate) conflicting(namespace string, now time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state(namespace)
	if st.conflictSince.IsZero() {
		st.conflictSince = now
	}
	return st.conflictSince
}

// forget drops what is kept about namespace.
func (g *writeGate) forget(namespace string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.namespaces, namespace)
}

// state returns what is kept about namespace, created empty on first use. The caller holds g.mu.
func (g *writeGate) state(namespace string) *namespaceState {
	st, ok := g.namespaces[namespace]
	if !ok {
		if g.namespaces == nil {
			g.namespaces = map[string]*namespaceState{}
		}
		st = &namespaceState{}
		g.namespaces[namespace] = st
	}
	return st
}

// addMissing adds to dst the timestamps of src whose result IDs dst lacks, and returns dst (made when nil).
func addMissing(dst, src map[string]metav1.Timestamp) map[string]metav1.Timestamp {
	if dst == nil {
		dst = make(map[string]metav1.Timestamp, len(src))
	}
	for id, ts := range src {
		if _, ok := dst[id]; !ok {
			dst[id] = ts
		}
	}
	return dst
}
