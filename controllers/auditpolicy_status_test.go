package controllers

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/results"
)

var (
	t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Minute)
)

// auditPolicyAt returns an AuditPolicy of generation gen with a status, modified by opts.
func auditPolicyAt(gen int64, opts ...func(*v1alpha1.AuditPolicy)) *v1alpha1.AuditPolicy {
	ap := &v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: gen}}
	for _, o := range opts {
		o(ap)
	}
	return ap
}

func withSafe(status metav1.ConditionStatus, reason string, gen int64, since time.Time) func(*v1alpha1.AuditPolicy) {
	return func(ap *v1alpha1.AuditPolicy) {
		ap.Status.Conditions = append(ap.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionSafeToEnforce, Status: status,
			Reason: reason, ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(since)})
	}
}

func withCounts(matched, fail int64) func(*v1alpha1.AuditPolicy) {
	return func(ap *v1alpha1.AuditPolicy) {
		ap.Status.Matched, ap.Status.Fail, ap.Status.Violations = matched, fail, fail
	}
}

func withPromotion(to v1alpha1.Enforcement, d time.Duration) func(*v1alpha1.AuditPolicy) {
	return func(ap *v1alpha1.AuditPolicy) {
		ap.Spec.Promotion = &v1alpha1.Promotion{To: to, For: metav1.Duration{Duration: d}}
	}
}

func withEnforcement(e v1alpha1.Enforcement) func(*v1alpha1.AuditPolicy) {
	return func(ap *v1alpha1.AuditPolicy) { ap.Spec.Enforcement = e }
}

func TestDesiredStatus(t *testing.T) {
	enforced := metav1.Condition{Type: v1alpha1.ConditionEnforced, Status: metav1.ConditionFalse, Reason: ReasonAuditOnly, Message: "m"}
	violating := results.Summary{Matched: 5, Violating: 2, Pass: 3, Fail: 1, Warn: 1, Skip: 1, Namespaces: map[string]int{"b": 1, "a": 1}}
	clean := results.Summary{Matched: 5, Pass: 5}
	unsafe := results.Safety{Status: metav1.ConditionFalse, Reason: "Violations", Message: "2 of 5 violate"}
	safe := results.Safety{Status: metav1.ConditionTrue, Reason: "NoViolations", Message: "none of 5 violates"}
	skipped := results.Safety{Status: metav1.ConditionUnknown, Reason: results.SafetySkipped, Message: "skips"}
	for _, tc := range []struct {
		name string
		ap   *v1alpha1.AuditPolicy
		obs  auditPolicyObservation
		// want: counts (matched, fail, warn, violations), SafeToEnforce status, reason, transition time
		matched, fail, warn, violations int64
		safe                            metav1.ConditionStatus
		reason                          string
		since                           time.Time
		compiled                        metav1.ConditionStatus
		top                             []v1alpha1.NamespaceViolations
		// says is a part of SafeToEnforce's message ("": not checked).
		says string
	}{
		{
			name: "first complete audit with violations", ap: auditPolicyAt(1),
			obs:     auditPolicyObservation{enforced: enforced, summary: violating, complete: true, at: t0, safety: unsafe},
			matched: 5, fail: 1, warn: 1, violations: 2, safe: metav1.ConditionFalse, reason: "Violations", since: t1,
			compiled: metav1.ConditionTrue, top: []v1alpha1.NamespaceViolations{{Namespace: "a", Violations: 1}, {Namespace: "b", Violations: 1}},
		},
		{
			name: "audit in progress: nothing known yet", ap: auditPolicyAt(1),
			obs:  auditPolicyObservation{enforced: enforced, summary: violating, complete: false, at: t0},
			safe: metav1.ConditionUnknown, reason: ReasonAuditPending, since: t1, compiled: metav1.ConditionTrue,
		},
		{
			name: "audit in progress keeps the last complete answer of this generation",
			ap:   auditPolicyAt(2, withSafe(metav1.ConditionTrue, "NoViolations", 2, t0), withCounts(5, 0)),
			obs:  auditPolicyObservation{enforced: enforced, summary: violating, complete: false, at: t1},
			safe: metav1.ConditionTrue, reason: "NoViolations", since: t0, matched: 5, compiled: metav1.ConditionTrue,
		},
		{
			name: "a new generation is pending until its own audit",
			ap:   auditPolicyAt(3, withSafe(metav1.ConditionTrue, "NoViolations", 2, t0), withCounts(5, 0)),
			obs:  auditPolicyObservation{enforced: enforced, summary: clean, complete: false, at: t1},
			safe: metav1.ConditionUnknown, reason: ReasonAuditPending, since: t1, matched: 5, compiled: metav1.ConditionTrue,
		},
		{
			name: "sharded audit pending: the message follows what it waits for",
			ap:   auditPolicyAt(2, withSafe(metav1.ConditionUnknown, ReasonAuditPending, 2, t0)),
			obs:  auditPolicyObservation{enforced: enforced, complete: false, pending: "members 1/3 of shard epoch 0 are behind"},
			safe: metav1.ConditionUnknown, reason: ReasonAuditPending, since: t0, compiled: metav1.ConditionTrue,
			says: "members 1/3 of shard epoch 0 are behind",
		},
		{
			name: "sharded audit pending keeps the last complete answer of this generation",
			ap:   auditPolicyAt(2, withSafe(metav1.ConditionFalse, "Violations", 2, t0), withCounts(5, 1)),
			obs:  auditPolicyObservation{enforced: enforced, complete: false, pending: "members 1/3 of shard epoch 0 are behind"},
			safe: metav1.ConditionFalse, reason: "Violations", since: t0, matched: 5, fail: 1, violations: 1, compiled: metav1.ConditionTrue,
		},
		{
			name: "still safe: the transition time stays",
			ap:   auditPolicyAt(2, withSafe(metav1.ConditionTrue, "NoViolations", 2, t0)),
			obs:  auditPolicyObservation{enforced: enforced, summary: clean, complete: true, at: t1, safety: safe},
			safe: metav1.ConditionTrue, reason: "NoViolations", since: t0, matched: 5, compiled: metav1.ConditionTrue,
		},
		{
			name: "judged nothing for sure: unknown with the audit's reason",
			ap:   auditPolicyAt(2, withSafe(metav1.ConditionTrue, "NoViolations", 2, t0)),
			obs:  auditPolicyObservation{enforced: enforced, summary: results.Summary{Matched: 5, Skip: 5}, complete: true, at: t1, safety: skipped},
			safe: metav1.ConditionUnknown, reason: results.SafetySkipped, since: t1, matched: 5, compiled: metav1.ConditionTrue,
		},
		{
			name: "does not compile: no counts, not safe",
			ap:   auditPolicyAt(2, withSafe(metav1.ConditionTrue, "NoViolations", 2, t0), withCounts(5, 0)),
			obs:  auditPolicyObservation{problems: []string{"spec.validations[0].expression: bad"}, enforced: enforced, summary: clean, complete: true, at: t1, safety: safe},
			safe: metav1.ConditionFalse, reason: ReasonCompileFailed, since: t1, compiled: metav1.ConditionFalse,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.ap.DeepCopy()
			st := desiredStatus(tc.ap, tc.obs, t1)
			if st.Matched != tc.matched || st.Fail != tc.fail || st.Warn != tc.warn || st.Violations != tc.violations {
				t.Errorf("counts: %+v", st)
			}
			var safe, compiled *metav1.Condition
			for i := range st.Conditions {
				switch st.Conditions[i].Type {
				case v1alpha1.ConditionSafeToEnforce:
					safe = &st.Conditions[i]
				case v1alpha1.ConditionCompiled:
					compiled = &st.Conditions[i]
				}
			}
			if safe == nil || safe.Status != tc.safe || safe.Reason != tc.reason || !safe.LastTransitionTime.Time.Equal(tc.since) {
				t.Errorf("SafeToEnforce = %+v, want %s %s since %s", safe, tc.safe, tc.reason, tc.since)
			}
			if safe != nil && !strings.Contains(safe.Message, tc.says) {
				t.Errorf("SafeToEnforce message %q lacks %q", safe.Message, tc.says)
			}
			if compiled == nil || compiled.Status != tc.compiled {
				t.Errorf("Compiled = %+v", compiled)
			}
			if tc.compiled == metav1.ConditionFalse && !strings.Contains(compiled.Message, "spec.validations[0].expression: bad") {
				t.Errorf("Compiled message %q lacks the problem", compiled.Message)
			}
			if len(st.TopNamespaces) != len(tc.top) || (len(tc.top) > 0 && st.TopNamespaces[0] != tc.top[0]) {
				t.Errorf("top namespaces %+v, want %+v", st.TopNamespaces, tc.top)
			}
			if st.ObservedGeneration != tc.ap.Generation {
				t.Errorf("observedGeneration %d", st.ObservedGeneration)
			}
			if tc.ap.Status.Matched != before.Status.Matched || len(tc.ap.Status.Conditions) != len(before.Status.Conditions) {
				t.Error("desiredStatus modified the AuditPolicy")
			}
		})
	}
}

func TestPromotionDue(t *testing.T) {
	for _, tc := range []struct {
		name string
		ap   *v1alpha1.AuditPolicy
		to   v1alpha1.Enforcement
		wait time.Duration
	}{
		{"no promotion", auditPolicyAt(1, withSafe(metav1.ConditionTrue, "", 1, t0)), "", 0},
		{"held long enough", auditPolicyAt(1, withPromotion(v1alpha1.Warn, time.Minute), withSafe(metav1.ConditionTrue, "", 1, t0)), v1alpha1.Warn, 0},
		{"not yet", auditPolicyAt(1, withPromotion(v1alpha1.Deny, 2*time.Minute), withSafe(metav1.ConditionTrue, "", 1, t0)), "", time.Minute},
		{"violations", auditPolicyAt(1, withPromotion(v1alpha1.Warn, 0), withSafe(metav1.ConditionFalse, "", 1, t0)), "", 0},
		{"unknown", auditPolicyAt(1, withPromotion(v1alpha1.Warn, 0), withSafe(metav1.ConditionUnknown, "", 1, t0)), "", 0},
		{"safe for an older generation", auditPolicyAt(2, withPromotion(v1alpha1.Warn, 0), withSafe(metav1.ConditionTrue, "", 1, t0)), "", 0},
		{"never backwards", auditPolicyAt(1, withEnforcement(v1alpha1.Deny), withPromotion(v1alpha1.Warn, 0), withSafe(metav1.ConditionTrue, "", 1, t0)), "", 0},
		{"already there", auditPolicyAt(1, withEnforcement(v1alpha1.Warn), withPromotion(v1alpha1.Warn, 0), withSafe(metav1.ConditionTrue, "", 1, t0)), "", 0},
		{"warn to deny", auditPolicyAt(1, withEnforcement(v1alpha1.Warn), withPromotion(v1alpha1.Deny, time.Minute), withSafe(metav1.ConditionTrue, "", 1, t0)), v1alpha1.Deny, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to, wait := promotionDue(tc.ap, t1)
			if to != tc.to || wait != tc.wait {
				t.Errorf("promotionDue = %q, %s; want %q, %s", to, wait, tc.to, tc.wait)
			}
		})
	}
}

func TestDesiredStatusBoundsMessages(t *testing.T) {
	long := strings.Repeat("é", maxConditionMessage)
	st := desiredStatus(auditPolicyAt(1), auditPolicyObservation{problems: []string{long}}, t1)
	for _, c := range st.Conditions {
		if len(c.Message) > maxConditionMessage {
			t.Errorf("%s message has %d bytes, more than %d", c.Type, len(c.Message), maxConditionMessage)
		}
		if c.Type == v1alpha1.ConditionCompiled && !strings.HasPrefix(c.Message, "éé") {
			t.Errorf("Compiled message %q does not keep the start of the problem", c.Message[:8])
		}
	}
}
