package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/results"
)

// readinessTopNamespaces is how many namespaces a readiness Event names, those with the most violations.
const readinessTopNamespaces = 3

// summarizer is the result store as readiness reads it.
type summarizer interface {
	Summaries() map[audit.PolicyKey]results.Summary
}

var _ summarizer = &results.Store{}

// readiness keeps what each policy decides across the objects it covers, as of the last complete audit: the
// last time its summaries were computed while every policy was registered and the scan had read everything
// with no rescan pending. While a (re)scan is under way it keeps the previous answer, so that a policy edit or
// a resync never shows a half-read cluster. It serves:
//
//   - the metrics of each policy (readinessCollector);
//   - an Event on the CRD, ValidatingAdmissionPolicy or AuditPolicy whenever the policy's safety
//     (results.SafetyOf: True, False or Unknown) changes, and for the first complete audit after the operator
//     starts, so that `kubectl describe` shows the current answer; never on a recompute that changes nothing;
//   - on a MutatingAdmissionPolicy instead, an Event when its drifted objects (warn results) go from none to
//     some, or back to none (see driftChanged);
//   - Summary, OnChange and OnAudit for other consumers (the status of celaudit's AuditPolicies).
//
// It is event-driven: Changed (called through the Notifier on every change of the results and whenever the
// audit may have settled: the scanner settled, the start-up gate opened) wakes it, and it recomputes at most
// once per Interval. A policy with no results (it covers no object, or was removed) has no summary.
type readiness struct {
	Results summarizer
	// Settled reports whether the audit is complete: every policy registered and the scan synced.
	Settled func() bool
	// Reader reads the policy objects Events are recorded on (the manager's cache holds them).
	Reader   client.Reader
	Events   EventRecorder
	Clock    clock.Clock
	Interval time.Duration
	Log      logr.Logger
	// Subresources returns the subresources a policy covers, which no audit judges (nil: none).
	Subresources func(audit.PolicyKey) []string
	// Share says that the summaries are one member's share of a sharded audit: no readiness Event is
	// recorded, which would judge a policy by some namespaces only (the leader writes the SafeToEnforce
	// condition of AuditPolicies from every member's share).
	Share bool

	wake chan struct{}

	mu          sync.Mutex
	policies    map[audit.PolicyKey]policyReadiness // replaced whole, never modified
	subscribers []func(changed []audit.PolicyKey)
	// audited is when the summaries of the last complete audit were taken; zero before the first.
	audited  time.Time
	auditors []func()
}

// policyReadiness is what readiness keeps of one policy.
type policyReadiness struct {
	summary results.Summary
	safety  results.Safety
	// since is when the summary took its value.
	since time.Time
}

// newReadiness returns a readiness that recomputes at most once per interval.
func newReadiness(store summarizer, settled func() bool, reader client.Reader, events EventRecorder, interval time.Duration, log logr.Logger) *readiness {
	return &readiness{
		Results:  store,
		Settled:  settled,
		Reader:   reader,
		Events:   events,
		Clock:    clock.RealClock{},
		Interval: interval,
		Log:      log,
		wake:     make(chan struct{}, 1),
	}
}

// Changed tells readiness that the results, or whether the audit is complete, may have changed. It never
// blocks: the result store calls it under its lock.
func (r *readiness) Changed() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Summary returns what the policy key decided at the last complete audit, and when that audit's summaries
// were taken: a policy registered (or rescanned) before at is covered by it. complete is false before the
// first complete audit. A policy without results at that audit (it covers no object, or it is gone) has the
// zero Summary.
func (r *readiness) Summary(key audit.PolicyKey) (s results.Summary, complete bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.policies[key].summary, !r.audited.IsZero(), r.audited
}

// OnAudit registers f to be called after every recompute from a complete audit, whether or not a summary
// changed: a policy waiting for its first complete audit may have none. Like OnChange's, f must not block.
func (r *readiness) OnAudit(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.auditors = append(r.auditors, f)
}

// OnChange registers f to be called with the keys, sorted, of the policies whose summary changed, appeared or
// disappeared at a recompute. f is called from readiness's own goroutine, outside its locks, after the
// recompute's Events are recorded; it must not block (enqueue the keys, say) and may call Summary.
func (r *readiness) OnChange(f func(changed []audit.PolicyKey)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subscribers = append(r.subscribers, f)
}

// snapshot returns the policies' readiness; the map is never modified.
func (r *readiness) snapshot() map[audit.PolicyKey]policyReadiness {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.policies
}

// Start recomputes whenever Changed was called, at most once per Interval, until ctx ends.
func (r *readiness) Start(ctx context.Context) error {
	var last time.Time // zero: never recomputed
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		}
		if wait := r.Interval - r.Clock.Since(last); !last.IsZero() && wait > 0 {
			t := r.Clock.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C():
			}
		}
		last = r.Clock.Now()
		r.recompute(ctx)
	}
}

// recompute computes the summaries if the audit is complete, and records what changed.
func (r *readiness) recompute(ctx context.Context) {
	var sums map[audit.PolicyKey]results.Summary
	complete := r.Settled()
	taken := r.Clock.Now()
	if complete {
		sums = r.Results.Summaries()
		// A rescan that began meanwhile may be half read: its settling wakes readiness again.
		complete = r.Settled()
	}
	r.mu.Lock()
	d := decideReadiness(r.policies, sums, complete, r.Clock.Now(), r.Subresources)
	r.policies = d.next
	subscribers := slices.Clone(r.subscribers)
	var auditors []func()
	if complete {
		r.audited = taken
		auditors = slices.Clone(r.auditors)
	}
	r.mu.Unlock()

	for _, key := range d.events {
		if !r.Share {
			r.record(ctx, key, d.next[key])
		}
	}
	for _, key := range d.drift {
		if !r.Share {
			r.recordDrift(ctx, key, d.next[key].summary)
		}
	}
	if len(d.changed) > 0 {
		for _, f := range subscribers {
			f(d.changed)
		}
	}
	for _, f := range auditors {
		f()
	}
}

// record records the readiness Event of policy key on its object; keys of sources without one are skipped.
func (r *readiness) record(ctx context.Context, key audit.PolicyKey, p policyReadiness) {
	obj, err := policyObject(ctx, r.Reader, key)
	if obj == nil {
		if err != nil {
			r.Log.V(1).Info("Policy of a readiness change not found", "policy", key.String(), "err", err.Error())
		}
		return
	}
	switch p.safety.Status {
	case metav1.ConditionTrue:
		r.Events.Eventf(obj, nil, corev1.EventTypeNormal, ReasonSafeToEnforce, "Audit", "%s", readinessNote(p.summary))
	case metav1.ConditionFalse:
		r.Events.Eventf(obj, nil, corev1.EventTypeWarning, ReasonNotSafeToEnforce, "Audit", "%s", readinessNote(p.summary))
	default:
		r.Events.Eventf(obj, nil, corev1.EventTypeNormal, ReasonSafeToEnforceUnknown, "Audit", "%s", p.safety.Message)
	}
}

// recordDrift records on the MutatingAdmissionPolicy of key that stored objects would be changed by it on
// their next write (Drifted), or that none would any more (InShape).
func (r *readiness) recordDrift(ctx context.Context, key audit.PolicyKey, s results.Summary) {
	obj, err := policyObject(ctx, r.Reader, key)
	if obj == nil {
		if err != nil {
			r.Log.V(1).Info("Policy of a drift change not found", "policy", key.String(), "err", err.Error())
		}
		return
	}
	if s.Violating > 0 {
		r.Events.Eventf(obj, nil, corev1.EventTypeWarning, ReasonDrifted, "Audit", "%s", driftNote(s))
		return
	}
	r.Events.Eventf(obj, nil, corev1.EventTypeNormal, ReasonInShape, "Audit", "%s", driftNote(s))
}

// driftNote describes a MutatingAdmissionPolicy's summary in an Event note: "3 stored objects would be changed
// by this policy on their next write (5 matched, 0 error)". Its warn results are its drifted objects.
func driftNote(s results.Summary) string {
	if s.Violating == 0 {
		return fmt.Sprintf("No stored object would be changed by this policy on its next write (%d matched, %d error)", s.Matched, s.Error)
	}
	return fmt.Sprintf("%d stored objects would be changed by this policy on their next write (%d matched, %d error)", s.Violating, s.Matched, s.Error)
}

// readinessNote describes a summary in an Event note: "3 of 120 matched objects violate the policy (2 fail,
// 1 warn, 0 error); most violations in namespaces a (2), b (1)". The counts in parentheses are results.
func readinessNote(s results.Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d matched objects violate the policy (%d fail, %d warn, %d error)", s.Violating, s.Matched, s.Fail, s.Warn, s.Error)
	top := s.TopNamespaces(readinessTopNamespaces)
	for i, ns := range top {
		switch {
		case i == 0 && len(top) == 1:
			b.WriteString("; violations in ")
		case i == 0:
			b.WriteString("; most violations in ")
		default:
			b.WriteString(", ")
		}
		name := "namespace " + ns.Namespace
		if ns.Namespace == "" {
			name = "cluster-scoped objects"
		}
		fmt.Fprintf(&b, "%s (%d)", name, ns.Violations)
	}
	return b.String()
}

// readinessDecision is what one recompute changes.
type readinessDecision struct {
	// next is the new readiness of every policy.
	next map[audit.PolicyKey]policyReadiness
	// events lists, sorted, the policies whose readiness Event is due: their first complete audit, or their
	// safety's status changed. MutatingAdmissionPolicies have none: they enforce nothing.
	events []audit.PolicyKey
	// drift lists, sorted, the MutatingAdmissionPolicies whose drift Event is due: some objects drifted
	// where none did before (or at their first complete audit), or none does any more.
	drift []audit.PolicyKey
	// changed lists, sorted, the policies whose summary changed, appeared or disappeared.
	changed []audit.PolicyKey
}

// decideReadiness decides a recompute: prev is the readiness so far, sums the summaries just computed and
// complete whether they reflect a complete audit; subresources (nil: none) returns the subresources a policy
// covers. An incomplete audit changes nothing.
func decideReadiness(prev map[audit.PolicyKey]policyReadiness, sums map[audit.PolicyKey]results.Summary, complete bool, now time.Time,
	subresources func(audit.PolicyKey) []string) readinessDecision {
	if !complete {
		return readinessDecision{next: prev}
	}
	d := readinessDecision{next: make(map[audit.PolicyKey]policyReadiness, len(sums))}
	for key, s := range sums {
		old, had := prev[key]
		var subs []string
		if subresources != nil {
			subs = subresources(key)
		}
		next := policyReadiness{summary: s, safety: results.SafetyOf(s, true, subs), since: now}
		mutating := key.Source == audit.SourceMAP
		if mutating && driftChanged(old.summary, had, s) {
			d.drift = append(d.drift, key)
		}
		switch {
		case !had:
			d.next[key] = next
			if !mutating {
				d.events = append(d.events, key)
			}
			d.changed = append(d.changed, key)
		case !old.summary.Equal(s) || old.safety.Status != next.safety.Status || old.safety.Reason != next.safety.Reason:
			d.next[key] = next
			if old.safety.Status != next.safety.Status && !mutating {
				d.events = append(d.events, key)
			}
			d.changed = append(d.changed, key)
		default:
			d.next[key] = old
		}
	}
	for key := range prev {
		if _, ok := sums[key]; !ok {
			d.changed = append(d.changed, key)
		}
	}
	slices.SortFunc(d.events, audit.PolicyKey.Compare)
	slices.SortFunc(d.drift, audit.PolicyKey.Compare)
	slices.SortFunc(d.changed, audit.PolicyKey.Compare)
	return d
}

// driftChanged reports whether a MutatingAdmissionPolicy's drift Event is due: objects drifted (warn results
// counted in Violating) at its first complete audit, or where none did at the last one, or none does any
// more where some did. A policy that has no results any more (removed, or covering nothing) gets none.
func driftChanged(prev results.Summary, had bool, now results.Summary) bool {
	if !had {
		return now.Violating > 0
	}
	return (prev.Violating > 0) != (now.Violating > 0)
}

// readinessCollector exposes each policy's summary at the last complete audit. A policy that is removed, or
// no longer has results, disappears from the metrics.
type readinessCollector struct {
	readiness *readiness
	results   *prometheus.Desc
	matched   *prometheus.Desc
	violating *prometheus.Desc
	safe      *prometheus.Desc
	// namespaces: the fail and warn results of every policy per namespace, for "where are the violations".
	namespaces *prometheus.Desc
	// drifted: the objects each MutatingAdmissionPolicy would change on their next write.
	drifted *prometheus.Desc
}

func newReadinessCollector(r *readiness) *readinessCollector {
	labels := []string{labelSource, "policy"}
	return &readinessCollector{
		readiness: r,
		results: prometheus.NewDesc("celaudit_policy_results",
			"Results of each policy by verdict, at the last complete audit.", append(slices.Clone(labels), "result"), nil),
		matched: prometheus.NewDesc("celaudit_policy_matched_objects",
			"Objects with at least one result of the policy, at the last complete audit.", labels, nil),
		violating: prometheus.NewDesc("celaudit_policy_violating_objects",
			"Objects with at least one fail or warn result of the policy, at the last complete audit.", labels, nil),
		safe: prometheus.NewDesc("celaudit_policy_safe_to_enforce",
			"1 when the policy is safe to enforce at the last complete audit: it judged objects and none fails, warns or errors; else 0 (violations, or nothing judged, skips, subresources, unreadable resources). Not exported for MutatingAdmissionPolicies.", labels, nil),
		namespaces: prometheus.NewDesc("celaudit_namespace_violations",
			"Fail and warn results of all policies in a namespace (\"\" for cluster-scoped objects), at the last complete audit; namespaces without any are left out.",
			[]string{"namespace"}, nil),
		drifted: prometheus.NewDesc("celaudit_mutation_drifted_objects",
			"Stored objects each MutatingAdmissionPolicy would change on their next write (its warn results), at the last complete audit.",
			[]string{"policy"}, nil),
	}
}

func (c *readinessCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.results
	ch <- c.matched
	ch <- c.violating
	ch <- c.safe
	ch <- c.namespaces
	ch <- c.drifted
}

func (c *readinessCollector) Collect(ch chan<- prometheus.Metric) {
	policies := c.readiness.snapshot()
	for _, key := range slices.SortedFunc(maps.Keys(policies), audit.PolicyKey.Compare) {
		s := policies[key].summary
		source, name := string(key.Source), key.Name
		for _, v := range []struct {
			verdict audit.Verdict
			n       int
		}{{audit.Pass, s.Pass}, {audit.Fail, s.Fail}, {audit.Warn, s.Warn}, {audit.Error, s.Error}, {audit.Skip, s.Skip}} {
			ch <- prometheus.MustNewConstMetric(c.results, prometheus.GaugeValue, float64(v.n), source, name, string(v.verdict))
		}
		ch <- prometheus.MustNewConstMetric(c.matched, prometheus.GaugeValue, float64(s.Matched), source, name)
		ch <- prometheus.MustNewConstMetric(c.violating, prometheus.GaugeValue, float64(s.Violating), source, name)
		if key.Source == audit.SourceMAP {
			// A MutatingAdmissionPolicy enforces nothing: its warnings are drift, and it has no safety to tell.
			ch <- prometheus.MustNewConstMetric(c.drifted, prometheus.GaugeValue, float64(s.Violating), name)
			continue
		}
		safe := 0.0
		if policies[key].safety.Safe() {
			safe = 1
		}
		ch <- prometheus.MustNewConstMetric(c.safe, prometheus.GaugeValue, safe, source, name)
	}
	byNamespace := map[string]int{}
	for _, p := range policies {
		for ns, n := range p.summary.Namespaces {
			byNamespace[ns] += n
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(byNamespace)) {
		ch <- prometheus.MustNewConstMetric(c.namespaces, prometheus.GaugeValue, float64(byNamespace[ns]), ns)
	}
}
