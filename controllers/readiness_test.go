package controllers

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/results"
)

func TestDecideReadiness(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(time.Minute)
	p, q, a := audit.VAPKey("p"), audit.CRDKey("q"), audit.AuditPolicyKey("a")
	safe := results.Summary{Matched: 3, Judged: 3, Pass: 3}
	safer := results.Summary{Matched: 4, Judged: 4, Pass: 4}
	failing := results.Summary{Matched: 3, Judged: 3, Violating: 1, Pass: 2, Fail: 1, Namespaces: map[string]int{"n": 1}}
	erroring := results.Summary{Matched: 3, Judged: 3, Pass: 2, Error: 1}
	skipping := results.Summary{Matched: 3, Skip: 3}
	// drifting is a MutatingAdmissionPolicy's: its warn results are the objects it would change.
	drifting := results.Summary{Matched: 3, Judged: 3, Violating: 2, Pass: 1, Warn: 2, Namespaces: map[string]int{"n": 2}}
	m := audit.MAPKey("m")
	// ready is a policy's readiness with the safety its summary has (here: by the names above), without message.
	safety := map[string]results.Safety{
		"safe": {Status: metav1.ConditionTrue, Reason: "NoViolations"}, "safer": {Status: metav1.ConditionTrue, Reason: "NoViolations"},
		"failing": {Status: metav1.ConditionFalse, Reason: "Violations"}, "erroring": {Status: metav1.ConditionFalse, Reason: "Violations"},
		"skipping": {Status: metav1.ConditionUnknown, Reason: "Skipped"}, "drifting": {Status: metav1.ConditionFalse, Reason: "Violations"},
	}
	names := map[*results.Summary]string{&safe: "safe", &safer: "safer", &failing: "failing", &erroring: "erroring", &skipping: "skipping", &drifting: "drifting"}
	ready := func(s results.Summary, since time.Time) policyReadiness {
		for ptr, name := range names {
			if ptr.Equal(s) {
				return policyReadiness{summary: s, safety: safety[name], since: since}
			}
		}
		t.Fatalf("no safety for %+v", s)
		return policyReadiness{}
	}
	unknownScale := results.Safety{Status: metav1.ConditionUnknown, Reason: "Subresources"}
	cases := []struct {
		name     string
		prev     map[audit.PolicyKey]policyReadiness
		sums     map[audit.PolicyKey]results.Summary
		complete bool
		// subresources are those of p.
		subresources []string
		want         readinessDecision
	}{{
		name:     "the first complete audit tells every policy, whatever its source",
		sums:     map[audit.PolicyKey]results.Summary{p: safe, q: failing, a: erroring},
		complete: true,
		want: readinessDecision{
			next: map[audit.PolicyKey]policyReadiness{p: ready(safe, now), q: ready(failing, now), a: ready(erroring, now)},
			// Sorted by source, then name: auditpolicy, crd, vap.
			events:  []audit.PolicyKey{a, q, p},
			changed: []audit.PolicyKey{a, q, p},
		},
	}, {
		name:     "an audit under way keeps the previous answer",
		prev:     map[audit.PolicyKey]policyReadiness{p: ready(failing, t0)},
		sums:     map[audit.PolicyKey]results.Summary{p: safe, q: failing},
		complete: false,
		want:     readinessDecision{next: map[audit.PolicyKey]policyReadiness{p: ready(failing, t0)}},
	}, {
		name:     "the first audit under way has no answer",
		complete: false,
		want:     readinessDecision{},
	}, {
		name:     "nothing changed",
		prev:     map[audit.PolicyKey]policyReadiness{p: ready(failing, t0)},
		sums:     map[audit.PolicyKey]results.Summary{p: {Matched: 3, Judged: 3, Violating: 1, Pass: 2, Fail: 1, Namespaces: map[string]int{"n": 1}}},
		complete: true,
		want:     readinessDecision{next: map[audit.PolicyKey]policyReadiness{p: ready(failing, t0)}},
	}, {
		name:     "counts change, readiness does not: subscribers are told, no Event",
		prev:     map[audit.PolicyKey]policyReadiness{p: ready(safe, t0)},
		sums:     map[audit.PolicyKey]results.Summary{p: safer},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{p: ready(safer, now)},
			changed: []audit.PolicyKey{p},
		},
	}, {
		name:     "a policy stops being safe",
		prev:     map[audit.PolicyKey]policyReadiness{p: ready(safe, t0), q: ready(safe, t0)},
		sums:     map[audit.PolicyKey]results.Summary{p: failing, q: safe},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{p: ready(failing, now), q: ready(safe, t0)},
			events:  []audit.PolicyKey{p},
			changed: []audit.PolicyKey{p},
		},
	}, {
		name:     "an error alone makes a policy unsafe",
		prev:     map[audit.PolicyKey]policyReadiness{p: ready(safe, t0)},
		sums:     map[audit.PolicyKey]results.Summary{p: erroring},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{p: ready(erroring, now)},
			events:  []audit.PolicyKey{p},
			changed: []audit.PolicyKey{p},
		},
	}, {
		name:     "a policy becomes safe",
		prev:     map[audit.PolicyKey]policyReadiness{p: ready(failing, t0)},
		sums:     map[audit.PolicyKey]results.Summary{p: safe},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{p: ready(safe, now)},
			events:  []audit.PolicyKey{p},
			changed: []audit.PolicyKey{p},
		},
	}, {
		name:     "a policy without results any more disappears, without an Event",
		prev:     map[audit.PolicyKey]policyReadiness{p: ready(failing, t0), q: ready(safe, t0)},
		sums:     map[audit.PolicyKey]results.Summary{q: safe},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{q: ready(safe, t0)},
			changed: []audit.PolicyKey{p},
		},
	}, {
		name:     "every result a skip: unknown, told as such",
		prev:     map[audit.PolicyKey]policyReadiness{p: ready(safe, t0)},
		sums:     map[audit.PolicyKey]results.Summary{p: skipping},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{p: ready(skipping, now)},
			events:  []audit.PolicyKey{p},
			changed: []audit.PolicyKey{p},
		},
	}, {
		name:         "clean objects of a policy covering subresources: unknown, not safe",
		prev:         map[audit.PolicyKey]policyReadiness{p: ready(safe, t0)},
		sums:         map[audit.PolicyKey]results.Summary{p: safe, q: safe},
		subresources: []string{"deployments/scale"},
		complete:     true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{p: {summary: safe, safety: unknownScale, since: now}, q: ready(safe, now)},
			events:  []audit.PolicyKey{q, p},
			changed: []audit.PolicyKey{q, p},
		},
	}, {
		name:     "a MutatingAdmissionPolicy that drifts at the first complete audit is told so, without a safety Event",
		sums:     map[audit.PolicyKey]results.Summary{m: drifting, p: safe},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{m: ready(drifting, now), p: ready(safe, now)},
			events:  []audit.PolicyKey{p},
			drift:   []audit.PolicyKey{m},
			changed: []audit.PolicyKey{m, p},
		},
	}, {
		name:     "a MutatingAdmissionPolicy in shape at the first complete audit has nothing to tell",
		sums:     map[audit.PolicyKey]results.Summary{m: safe},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{m: ready(safe, now)},
			changed: []audit.PolicyKey{m},
		},
	}, {
		name:     "a MutatingAdmissionPolicy's drifted count changes between non-zero values: no Event",
		prev:     map[audit.PolicyKey]policyReadiness{m: ready(failing, t0)},
		sums:     map[audit.PolicyKey]results.Summary{m: drifting},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{m: ready(drifting, now)},
			changed: []audit.PolicyKey{m},
		},
	}, {
		name:     "a MutatingAdmissionPolicy starts drifting",
		prev:     map[audit.PolicyKey]policyReadiness{m: ready(safe, t0)},
		sums:     map[audit.PolicyKey]results.Summary{m: drifting},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{m: ready(drifting, now)},
			drift:   []audit.PolicyKey{m},
			changed: []audit.PolicyKey{m},
		},
	}, {
		name:     "a MutatingAdmissionPolicy's objects are all in shape again",
		prev:     map[audit.PolicyKey]policyReadiness{m: ready(drifting, t0)},
		sums:     map[audit.PolicyKey]results.Summary{m: safe},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{m: ready(safe, now)},
			drift:   []audit.PolicyKey{m},
			changed: []audit.PolicyKey{m},
		},
	}, {
		name:     "a drifting MutatingAdmissionPolicy removed: no Event",
		prev:     map[audit.PolicyKey]policyReadiness{m: ready(drifting, t0)},
		sums:     map[audit.PolicyKey]results.Summary{},
		complete: true,
		want: readinessDecision{
			next:    map[audit.PolicyKey]policyReadiness{},
			changed: []audit.PolicyKey{m},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := decideReadiness(tc.prev, tc.sums, tc.complete, now, func(k audit.PolicyKey) []string {
				if k == p {
					return tc.subresources
				}
				return nil
			})
			for k, r := range got.next {
				r.safety.Message = ""
				got.next[k] = r
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decideReadiness =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}

func TestReadinessNote(t *testing.T) {
	cases := []struct {
		s    results.Summary
		want string
	}{
		{results.Summary{Matched: 120, Pass: 120}, "0 of 120 matched objects violate the policy (0 fail, 0 warn, 0 error)"},
		{results.Summary{Matched: 120, Pass: 118, Error: 2}, "0 of 120 matched objects violate the policy (0 fail, 0 warn, 2 error)"},
		{
			results.Summary{Matched: 120, Violating: 1, Fail: 2, Namespaces: map[string]int{"team-a": 2}},
			"1 of 120 matched objects violate the policy (2 fail, 0 warn, 0 error); violations in namespace team-a (2)",
		},
		{
			results.Summary{Matched: 120, Violating: 6, Fail: 4, Warn: 3, Error: 1, Namespaces: map[string]int{"a": 1, "b": 2, "c": 2, "": 2}},
			"6 of 120 matched objects violate the policy (4 fail, 3 warn, 1 error); most violations in cluster-scoped objects (2), namespace b (2), namespace c (2)",
		},
	}
	for _, tc := range cases {
		if got := readinessNote(tc.s); got != tc.want {
			t.Errorf("readinessNote(%+v) =\n %q\nwant\n %q", tc.s, got, tc.want)
		}
	}
}

func TestReadinessCollector(t *testing.T) {
	r := newReadiness(nil, nil, nil, nil, time.Second, logr.Discard())
	r.policies = map[audit.PolicyKey]policyReadiness{
		audit.VAPKey("owners"):              {summary: results.Summary{Matched: 3, Violating: 1, Pass: 3, Fail: 1, Warn: 1, Skip: 2, Namespaces: map[string]int{"n": 2}}},
		audit.CRDKey("widgets.example.com"): {summary: results.Summary{Matched: 3, Violating: 2, Pass: 2, Fail: 3, Namespaces: map[string]int{"m": 1, "n": 2}}},
		audit.VAPKey("clean"):               {summary: results.Summary{Matched: 2, Pass: 2}, safety: results.Safety{Status: metav1.ConditionTrue}},
		audit.VAPKey("skipped"):             {summary: results.Summary{Matched: 2, Skip: 2}, safety: results.Safety{Status: metav1.ConditionUnknown}},
		audit.MAPKey("labels"):              {summary: results.Summary{Matched: 3, Violating: 2, Pass: 1, Warn: 2, Namespaces: map[string]int{"m": 2}}},
	}
	want := `
# HELP celaudit_namespace_violations Fail and warn results of all policies in a namespace ("" for cluster-scoped objects), at the last complete audit; namespaces without any are left out.
# TYPE celaudit_namespace_violations gauge
celaudit_namespace_violations{namespace="m"} 3
celaudit_namespace_violations{namespace="n"} 4
# HELP celaudit_mutation_drifted_objects Stored objects each MutatingAdmissionPolicy would change on their next write (its warn results), at the last complete audit.
# TYPE celaudit_mutation_drifted_objects gauge
celaudit_mutation_drifted_objects{policy="labels"} 2
# HELP celaudit_policy_matched_objects Objects with at least one result of the policy, at the last complete audit.
# TYPE celaudit_policy_matched_objects gauge
celaudit_policy_matched_objects{policy="clean",source="vap"} 2
celaudit_policy_matched_objects{policy="labels",source="map"} 3
celaudit_policy_matched_objects{policy="owners",source="vap"} 3
celaudit_policy_matched_objects{policy="skipped",source="vap"} 2
celaudit_policy_matched_objects{policy="widgets.example.com",source="crd"} 3
# HELP celaudit_policy_results Results of each policy by verdict, at the last complete audit.
# TYPE celaudit_policy_results gauge
celaudit_policy_results{policy="clean",result="error",source="vap"} 0
celaudit_policy_results{policy="clean",result="fail",source="vap"} 0
celaudit_policy_results{policy="clean",result="pass",source="vap"} 2
celaudit_policy_results{policy="clean",result="skip",source="vap"} 0
celaudit_policy_results{policy="clean",result="warn",source="vap"} 0
celaudit_policy_results{policy="labels",result="error",source="map"} 0
celaudit_policy_results{policy="labels",result="fail",source="map"} 0
celaudit_policy_results{policy="labels",result="pass",source="map"} 1
celaudit_policy_results{policy="labels",result="skip",source="map"} 0
celaudit_policy_results{policy="labels",result="warn",source="map"} 2
celaudit_policy_results{policy="owners",result="error",source="vap"} 0
celaudit_policy_results{policy="owners",result="fail",source="vap"} 1
celaudit_policy_results{policy="owners",result="pass",source="vap"} 3
celaudit_policy_results{policy="owners",result="skip",source="vap"} 2
celaudit_policy_results{policy="owners",result="warn",source="vap"} 1
celaudit_policy_results{policy="skipped",result="error",source="vap"} 0
celaudit_policy_results{policy="skipped",result="fail",source="vap"} 0
celaudit_policy_results{policy="skipped",result="pass",source="vap"} 0
celaudit_policy_results{policy="skipped",result="skip",source="vap"} 2
celaudit_policy_results{policy="skipped",result="warn",source="vap"} 0
celaudit_policy_results{policy="widgets.example.com",result="error",source="crd"} 0
celaudit_policy_results{policy="widgets.example.com",result="fail",source="crd"} 3
celaudit_policy_results{policy="widgets.example.com",result="pass",source="crd"} 2
celaudit_policy_results{policy="widgets.example.com",result="skip",source="crd"} 0
celaudit_policy_results{policy="widgets.example.com",result="warn",source="crd"} 0
# HELP celaudit_policy_safe_to_enforce 1 when the policy is safe to enforce at the last complete audit: it judged objects and none fails, warns or errors; else 0 (violations, or nothing judged, skips, subresources, unreadable resources). Not exported for MutatingAdmissionPolicies.
# TYPE celaudit_policy_safe_to_enforce gauge
celaudit_policy_safe_to_enforce{policy="clean",source="vap"} 1
celaudit_policy_safe_to_enforce{policy="owners",source="vap"} 0
celaudit_policy_safe_to_enforce{policy="skipped",source="vap"} 0
celaudit_policy_safe_to_enforce{policy="widgets.example.com",source="crd"} 0
# HELP celaudit_policy_violating_objects Objects with at least one fail or warn result of the policy, at the last complete audit.
# TYPE celaudit_policy_violating_objects gauge
celaudit_policy_violating_objects{policy="clean",source="vap"} 0
celaudit_policy_violating_objects{policy="labels",source="map"} 2
celaudit_policy_violating_objects{policy="owners",source="vap"} 1
celaudit_policy_violating_objects{policy="skipped",source="vap"} 0
celaudit_policy_violating_objects{policy="widgets.example.com",source="crd"} 2
`
	if err := testutil.CollectAndCompare(newReadinessCollector(r), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// fakeSummaries is a result store whose summaries the test sets, and that counts the calls to Summaries.
type fakeSummaries struct {
	mu    sync.Mutex
	sums  map[audit.PolicyKey]results.Summary
	calls int
}

func (f *fakeSummaries) set(sums map[audit.PolicyKey]results.Summary) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sums = sums
}

func (f *fakeSummaries) Summaries() map[audit.PolicyKey]results.Summary {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.sums
}

func (f *fakeSummaries) called() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// TestReadinessLoop runs readiness against a fake store and clock: it recomputes at once after a quiet
// period, then at most once per interval however often it is woken, records an Event when a policy's
// readiness changes, and decides nothing while the audit is incomplete.
func TestReadinessLoop(t *testing.T) {
	const interval = 5 * time.Second
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := &fakeSummaries{}
	var settled sync.Map // "settled" -> bool
	settled.Store("settled", true)
	reader := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}},
	).Build()
	events := &recordedEvents{}
	r := newReadiness(store, func() bool { v, _ := settled.Load("settled"); return v.(bool) }, reader, events, interval, logr.Discard())
	r.Clock = clock
	changes := make(chan []audit.PolicyKey, 10)
	r.OnChange(func(changed []audit.PolicyKey) { changes <- changed })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("readiness stopped with %v", err)
		}
	}()

	expectChange := func(want ...audit.PolicyKey) {
		t.Helper()
		select {
		case got := <-changes:
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("changed %v, want %v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no change reported, want %v", want)
		}
	}
	waitForTimer := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !clock.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("readiness never waited for the interval")
			}
			time.Sleep(time.Millisecond)
		}
	}
	p, a := audit.VAPKey("p"), audit.AuditPolicyKey("a")
	failing := results.Summary{Matched: 2, Judged: 2, Violating: 1, Pass: 1, Fail: 1, Namespaces: map[string]int{"n": 1}}
	passing := results.Summary{Matched: 2, Judged: 2, Pass: 2}

	// The first change after a quiet period is computed at once: an Event for the VAP, none for the
	// AuditPolicy, which has no object Events are recorded on.
	store.set(map[audit.PolicyKey]results.Summary{p: failing, a: passing})
	r.Changed()
	expectChange(a, p)
	if got, complete, at := r.Summary(p); !got.Equal(failing) || !complete || !at.Equal(clock.Now()) {
		t.Errorf("Summary(p) = %+v, %v, %v; want %+v, true, %v", got, complete, at, failing, clock.Now())
	}

	// Changes within the interval wait for it, and are computed once.
	store.set(map[audit.PolicyKey]results.Summary{p: passing, a: passing})
	r.Changed()
	waitForTimer()
	r.Changed()
	r.Changed()
	if n := store.called(); n != 1 {
		t.Fatalf("Summaries called %d times before the interval passed, want 1", n)
	}
	clock.Step(interval)
	expectChange(p)
	waitForTimer() // woken meanwhile: waits for the next interval, computing nothing now
	if n := store.called(); n != 2 {
		t.Fatalf("Summaries called %d times after one interval, want 2", n)
	}

	// An incomplete audit decides nothing; once it completes, the new answer is recorded.
	settled.Store("settled", false)
	store.set(map[audit.PolicyKey]results.Summary{p: failing, a: passing})
	clock.Step(interval)
	r.Changed()
	waitForTimer() // the incomplete recompute is over
	if n, pending, recorded := store.called(), len(changes), len(events.list()); n != 2 || pending != 0 || recorded != 2 {
		t.Fatalf("during an incomplete audit: %d calls of Summaries, %d changes reported, %d Events; want 2, 0, 2", n, pending, recorded)
	}
	settled.Store("settled", true)
	clock.Step(interval)
	expectChange(p)

	want := []string{
		"Warning NotSafeToEnforce *v1.ValidatingAdmissionPolicy/p: 1 of 2 matched objects violate the policy (1 fail, 0 warn, 0 error); violations in namespace n (1)",
		"Normal SafeToEnforce *v1.ValidatingAdmissionPolicy/p: 0 of 2 matched objects violate the policy (0 fail, 0 warn, 0 error)",
		"Warning NotSafeToEnforce *v1.ValidatingAdmissionPolicy/p: 1 of 2 matched objects violate the policy (1 fail, 0 warn, 0 error); violations in namespace n (1)",
	}
	if got := events.list(); !reflect.DeepEqual(got, want) {
		t.Errorf("Events:\n %q\nwant\n %q", got, want)
	}
	if got, complete, at := r.Summary(audit.CRDKey("p")); !complete || !got.Equal(results.Summary{}) || !at.Equal(clock.Now()) {
		t.Errorf("Summary of a policy without results = %+v, %v, %v; want the zero Summary of the last complete audit, true, %v",
			got, complete, at, clock.Now())
	}
}

// startingRescan is a result store during whose Summaries a rescan begins.
type startingRescan struct {
	sums    map[audit.PolicyKey]results.Summary
	settled *bool
}

func (s startingRescan) Summaries() map[audit.PolicyKey]results.Summary {
	*s.settled = false
	return s.sums
}

// A rescan that begins while the summaries are computed may have changed some of them already: they are not
// those of a complete audit, and decide nothing.
func TestReadinessRescanDuringSummaries(t *testing.T) {
	settled := true
	store := startingRescan{sums: map[audit.PolicyKey]results.Summary{audit.VAPKey("p"): {Matched: 1, Pass: 1}}, settled: &settled}
	events := &recordedEvents{}
	r := newReadiness(store, func() bool { return settled }, nil, events, time.Second, logr.Discard())
	audits := 0
	r.OnAudit(func() { audits++ })
	r.recompute(context.Background())
	if audits != 0 {
		t.Errorf("an incomplete audit told %d auditors", audits)
	}
	if _, complete, _ := r.Summary(audit.VAPKey("p")); complete || len(events.list()) != 0 {
		t.Errorf("a summary computed while a rescan began was kept (complete %v) or told (%q)", complete, events.list())
	}
}

// staticSummaries is a result store whose summaries never change.
type staticSummaries map[audit.PolicyKey]results.Summary

func (s staticSummaries) Summaries() map[audit.PolicyKey]results.Summary { return s }

// Every complete audit is told, even when no summary changed: a policy waiting for its first complete audit
// (one that covers no object, say) has no summary to change.
func TestReadinessTellsEveryCompleteAudit(t *testing.T) {
	r := newReadiness(staticSummaries{}, func() bool { return true }, nil, &recordedEvents{}, time.Second, logr.Discard())
	audits, changes := 0, 0
	r.OnAudit(func() { audits++ })
	r.OnChange(func([]audit.PolicyKey) { changes++ })
	r.recompute(context.Background())
	r.recompute(context.Background())
	if audits != 2 || changes != 0 {
		t.Errorf("two complete audits without summaries: %d audits told, %d changes; want 2, 0", audits, changes)
	}
	if s, complete, _ := r.Summary(audit.AuditPolicyKey("empty")); !complete || !s.Equal(results.Summary{}) {
		t.Errorf("Summary of a policy without results = %+v, %v; want the zero Summary, true", s, complete)
	}
}
