package controllers

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/results"
)

const (
	maxConditionMessage    = 4096
	topViolatingNamespaces = 10
)

// auditPolicyObservation is what the reconciler gathered about one AuditPolicy: the inputs of its status.
type auditPolicyObservation struct {
	// problems are the compile problems; none when the policy compiled.
	problems []string
	// enforced is the Enforced condition (without times).
	enforced metav1.Condition
	// summary is the policy's summary; complete says it is from a complete audit of this generation by this
	// process, taken at at; safety is what that audit answers (AuditPending when it is not complete).
	summary  results.Summary
	complete bool
	at       time.Time
	safety   results.Safety
	// pending says why a sharded audit is not complete; "" when it is, or is not sharded.
	pending string
	// admissionPolicy names the ValidatingAdmissionPolicy registered for it, "" when none.
	admissionPolicy string
	// exemptions are what the audit and the registered pair leave out.
	exemptions v1alpha1.Exemptions
}

// desiredStatus returns ap's status for what was observed at now. Conditions keep their transition time
// while their status does not change. Counts and SafeToEnforce change only with a complete audit: while a
// (re)scan runs they keep describing the last complete one.
func desiredStatus(ap *v1alpha1.AuditPolicy, o auditPolicyObservation, now time.Time) v1alpha1.AuditPolicyStatus {
	st := *ap.Status.DeepCopy()
	st.ObservedGeneration = ap.Generation
	st.AdmissionPolicy = o.admissionPolicy
	st.Exemptions = o.exemptions.DeepCopy()
	set := func(c metav1.Condition) {
		c.ObservedGeneration = ap.Generation
		c.LastTransitionTime = metav1.NewTime(now)
		c.Message = report.TruncateMessage(c.Message, maxConditionMessage)
		meta.SetStatusCondition(&st.Conditions, c)
	}
	set(compiledCondition(o.problems))
	set(o.enforced)
	switch {
	case len(o.problems) > 0:
		st.Matched, st.Pass, st.Fail, st.Warn, st.Error, st.Skip, st.Violations = 0, 0, 0, 0, 0, 0, 0
		st.TopNamespaces = nil
		set(metav1.Condition{Type: v1alpha1.ConditionSafeToEnforce, Status: metav1.ConditionFalse, Reason: ReasonCompileFailed,
			Message: "the policy does not compile, so it is not audited"})
	case o.complete:
		s := o.summary
		st.Matched, st.Pass, st.Fail, st.Warn, st.Error, st.Skip = int64(s.Matched), int64(s.Pass), int64(s.Fail), int64(s.Warn), int64(s.Error), int64(s.Skip)
		st.Violations = int64(s.Violations())
		st.TopNamespaces = nil
		for _, n := range s.TopNamespaces(topViolatingNamespaces) {
			st.TopNamespaces = append(st.TopNamespaces, v1alpha1.NamespaceViolations{Namespace: n.Namespace, Violations: int64(n.Violations)})
		}
		at := metav1.NewTime(o.at)
		st.LastAuditTime = &at
		set(metav1.Condition{Type: v1alpha1.ConditionSafeToEnforce, Status: o.safety.Status, Reason: o.safety.Reason, Message: o.safety.Message})
	case staleSafeToEnforce(st.Conditions, ap.Generation) || (o.pending != "" && auditPending(st.Conditions)):
		// A new generation is judged by its own audit, and a promotion waits for it. While a sharded audit
		// is pending, the message follows what it waits for.
		message := "the first complete audit of the policy is in progress"
		if o.pending != "" {
			message += ": " + o.pending
		}
		set(metav1.Condition{Type: v1alpha1.ConditionSafeToEnforce, Status: metav1.ConditionUnknown, Reason: ReasonAuditPending,
			Message: message})
	}
	return st
}

// staleSafeToEnforce reports whether SafeToEnforce is missing, or describes another generation, or a
// generation that did not compile.
func staleSafeToEnforce(conditions []metav1.Condition, generation int64) bool {
	c := meta.FindStatusCondition(conditions, v1alpha1.ConditionSafeToEnforce)
	return c == nil || c.ObservedGeneration != generation || c.Reason == ReasonCompileFailed
}

// auditPending reports whether SafeToEnforce waits for a complete audit.
func auditPending(conditions []metav1.Condition) bool {
	c := meta.FindStatusCondition(conditions, v1alpha1.ConditionSafeToEnforce)
	return c != nil && c.Reason == ReasonAuditPending
}

func compiledCondition(problems []string) metav1.Condition {
	if len(problems) == 0 {
		return metav1.Condition{Type: v1alpha1.ConditionCompiled, Status: metav1.ConditionTrue, Reason: ReasonCompiled,
			Message: "every expression compiles"}
	}
	return metav1.Condition{Type: v1alpha1.ConditionCompiled, Status: metav1.ConditionFalse, Reason: ReasonCompileFailed,
		Message: strings.Join(problems, "; ")}
}

// promotionDue returns the enforcement ap's promotion moves it to at now, or "" and how long until it may
// (0 when it never will as things stand). Promotion only moves forward, and only once SafeToEnforce has been
// True, from complete audits, for the promotion's duration.
func promotionDue(ap *v1alpha1.AuditPolicy, now time.Time) (v1alpha1.Enforcement, time.Duration) {
	p := ap.Spec.Promotion
	if p == nil || p.To.Stage() <= ap.EnforcementOrDefault().Stage() {
		return "", 0
	}
	c := meta.FindStatusCondition(ap.Status.Conditions, v1alpha1.ConditionSafeToEnforce)
	if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != ap.Generation {
		return "", 0
	}
	held := now.Sub(c.LastTransitionTime.Time)
	if held >= p.For.Duration {
		return p.To, 0
	}
	return "", p.For.Duration - held
}
