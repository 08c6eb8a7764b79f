package whatif

import (
	"github.com/celaudit/celaudit/internal/audit"
)

// Property keys and values a what-if run adds to results.
const (
	// PropWhatif tells how a result under the proposal compares with today: WhatifNew, WhatifFixed or
	// WhatifUnchanged.
	PropWhatif = "whatif"
	// PropOnUpdate, on a fail result, says what the API server does with the object's next UPDATE:
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

// sameFinding reports whether two results of one policy on one object are the same finding: the same rule
// giving the same verdict and message, through the same binding, param, CRD version and pod template. The
// binding's operation and validationActions are left out: switching a binding from Warn to Deny turns a warn
// into a fail, a new finding, through the verdict alone.
func sameFinding(a, b audit.Result) bool {
	if a.Verdict != b.Verdict || a.Rule != b.Rule || a.Message != b.Message {
		return false
	}
	for _, k := range []string{audit.PropBinding, audit.PropParam, audit.PropCRDVersion, audit.PropPodTemplate} {
		if a.Properties[k] != b.Properties[k] {
			return false
		}
	}
	return true
}

// Compare compares the results of one policy on one object today and under the proposal. It returns the
// whatif value of each proposed result, and today's failing results that the proposal no longer gives.
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
		if failing(t.Verdict) && !containsFinding(proposed, t) {
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
