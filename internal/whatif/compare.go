package whatif

import (
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/mutate"
)

// Property keys and values a what-if run adds to results.
const (
	// PropWhatif tells how a result under the proposal compares with today: WhatifNew, WhatifFixed or
	// WhatifUnchanged.
	PropWhatif = "whatif"
	// PropOnUpdate, on a result that rejects (see Rejects), says what the API server does with the object's next UPDATE:
	// OnUpdateRejected, OnUpdateRatcheted or OnUpdateAllowed.
	PropOnUpdate = "onUpdate"

	// WhatifNew: the object gives this result only under the proposal.
	WhatifNew = "new"
	// WhatifFixed: the object fails this way today and not under the proposal (on a pass: every failure
	// of today is gone).
	WhatifFixed = "fixed"
	// WhatifUnchanged: the object gives this result today as well (on a pass: it passes today too).
	WhatifUnchanged = "unchanged"
)

// failing reports whether v is a verdict of something wrong with the object: a failure, a warning, or an
// error evaluating a rule.
func failing(v audit.Verdict) bool {
	return v == audit.Fail || v == audit.Warn || v == audit.Error
}

// escalated reports whether the proposal gives today's warning t as a failure: the same finding (see
// sameFinding) with the verdict a Deny binding gives where a Warn binding warned. Nothing is fixed then; the
// object is rejected instead of warned about, which the proposal's fail says as a new finding.
func escalated(t audit.Result, proposed []audit.Result) bool {
	if t.Verdict != audit.Warn {
		return false
	}
	asFail := t
	asFail.Verdict = audit.Fail
	return containsFinding(proposed, asFail)
}

// sameFinding reports whether two results of one policy on one object are the same finding: the same verdict
// and message at the same field, through the same binding, param, CRD version and pod template, and for a
// MutatingAdmissionPolicy with the same patch. The rule's
// identity is left out, since it is its position (a CRD revision that drops a rule renumbers the others),
// and so are the binding's operation and validationActions: switching a binding from Warn to Deny turns a
// warn into a fail, a new finding, through the verdict alone.
func sameFinding(a, b audit.Result) bool {
	if a.Verdict != b.Verdict || a.Message != b.Message {
		return false
	}
	for _, k := range []string{audit.PropFieldPath, audit.PropBinding, audit.PropParam, audit.PropCRDVersion, audit.PropPodTemplate, mutate.PropPatch} {
		if a.Properties[k] != b.Properties[k] {
			return false
		}
	}
	return true
}

// Rejects reports whether the API server rejects a request for which a policy gives r, by the rules of its
// admission dispatcher: a failure; a CRD rule that could not be evaluated; for a ValidatingAdmissionPolicy
// under failurePolicy Fail, an error of the policy as a whole, a configuration error of a binding or an
// error of an auditAnnotation (whatever the binding's actions), or any error of a binding with Deny.
func Rejects(r audit.Result) bool {
	switch {
	case r.Verdict == audit.Fail:
		return true
	case r.Verdict != audit.Error:
		return false
	case r.Properties[audit.PropCRDVersion] != "":
		return true
	case r.Properties[audit.PropFailurePolicy] != string(admissionregistrationv1.Fail):
		return false
	}
	binding := r.Properties[audit.PropBinding]
	return binding == "" ||
		strings.HasPrefix(r.Message, configErrorPrefix) ||
		strings.HasPrefix(r.Rule, "auditAnnotations[") ||
		slices.Contains(strings.Split(r.Properties[audit.PropValidationActions], ","), string(admissionregistrationv1.Deny))
}

// configErrorPrefix starts the message of a binding's configuration error (a missing param, an object that
// cannot be converted to the version the policy reads).
const configErrorPrefix = "failed to configure binding: "

// Compare compares the results of one policy on one object today and under the proposal. It returns the
// whatif value of each proposed result, and today's failing results that the proposal no longer gives (a
// warning the proposal turns into a failure is not among them: see escalated).
func Compare(today, proposed []audit.Result) (whatif []string, fixed []audit.Result) {
	failedToday := false
	for _, t := range today {
		failedToday = failedToday || failing(t.Verdict)
	}
	whatif = make([]string, len(proposed))
	for i, p := range proposed {
		switch {
		case p.Verdict == audit.Pass && failedToday:
			whatif[i] = WhatifFixed
		case p.Verdict == audit.Pass:
			whatif[i] = WhatifUnchanged
		case containsFinding(today, p):
			whatif[i] = WhatifUnchanged
		default:
			whatif[i] = WhatifNew
		}
	}
	for _, t := range today {
		if failing(t.Verdict) && !containsFinding(proposed, t) && !escalated(t, proposed) {
			fixed = append(fixed, t)
		}
	}
	return whatif, fixed
}

func containsFinding(results []audit.Result, r audit.Result) bool {
	for _, o := range results {
		if sameFinding(o, r) {
			return true
		}
	}
	return false
}
