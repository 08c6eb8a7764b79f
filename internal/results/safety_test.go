package results

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSafetyOf(t *testing.T) {
	const (
		True    = metav1.ConditionTrue
		False   = metav1.ConditionFalse
		Unknown = metav1.ConditionUnknown
	)
	cases := []struct {
		name         string
		s            Summary
		incomplete   bool
		subresources []string
		status       metav1.ConditionStatus
		reason       string
		// says are parts the message must hold.
		says []string
	}{
		{name: "judged and clean", s: Summary{Matched: 3, Judged: 3, Pass: 3},
			status: True, reason: "NoViolations", says: []string{"among the 3 matched objects"}},
		{name: "a fail", s: Summary{Matched: 3, Judged: 3, Violating: 1, Pass: 2, Fail: 1},
			status: False, reason: "Violations", says: []string{"1 of 3 matched objects", "1 fail, 0 warn and 0 error"}},
		{name: "a warn", s: Summary{Matched: 3, Judged: 3, Violating: 1, Pass: 2, Warn: 1}, status: False, reason: "Violations"},
		{name: "an error on an object", s: Summary{Matched: 3, Judged: 3, Pass: 2, Error: 1},
			status: False, reason: "Violations", says: []string{"0 fail, 0 warn and 1 error"}},
		{name: "nothing matched", s: Summary{},
			status: Unknown, reason: "NothingJudged", says: []string{"judged no stored object"}},
		{name: "every result a skip", s: Summary{Matched: 4, Skip: 4},
			status: Unknown, reason: "Skipped", says: []string{"4 results are skips", "request.userInfo", "judged no stored object"}},
		{name: "some skips among passes", s: Summary{Matched: 4, Judged: 3, Pass: 3, Skip: 1}, status: Unknown, reason: "Skipped"},
		{name: "a resource that cannot be read, the rest clean", s: Summary{Matched: 2, Judged: 2, Pass: 2, Error: 1, Resources: 1, ResourceErrors: 1},
			status: Unknown, reason: "ResourcesNotJudged", says: []string{"cannot be read or is not audited"}},
		{name: "a resource that cannot be read, nothing else", s: Summary{Error: 1, Resources: 1, ResourceErrors: 1},
			status: Unknown, reason: "ResourcesNotJudged", says: []string{"cannot be read", "judged no stored object"}},
		{name: "subresources, nothing matched", s: Summary{}, subresources: []string{"deployments/scale"},
			status: Unknown, reason: "Subresources", says: []string{"(deployments/scale)", "judged no stored object"}},
		{name: "subresources with clean objects", s: Summary{Matched: 5, Judged: 5, Pass: 5}, subresources: []string{"*/*"},
			status: Unknown, reason: "Subresources", says: []string{"(*/*)"}},
		{name: "violations decide before what is unknown", s: Summary{Matched: 3, Judged: 2, Violating: 1, Pass: 1, Fail: 1, Skip: 1},
			subresources: []string{"*/*"}, status: False, reason: "Violations"},
		{name: "an unreadable resource with a failing object", s: Summary{Matched: 1, Judged: 1, Violating: 1, Fail: 1, Error: 1, Resources: 1, ResourceErrors: 1},
			status: False, reason: "Violations", says: []string{"1 fail, 0 warn and 0 error"}},
		{name: "incomplete audit: nothing known", s: Summary{Matched: 3, Judged: 3, Pass: 3}, incomplete: true,
			status: Unknown, reason: "AuditPending"},
		{name: "incomplete audit with violations: still nothing known", s: Summary{Matched: 3, Judged: 3, Fail: 3}, incomplete: true,
			status: Unknown, reason: "AuditPending"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := SafetyOf(tc.s, !tc.incomplete, tc.subresources)
			if got.Status != tc.status || got.Reason != tc.reason {
				t.Errorf("SafetyOf = %s %s (%s), want %s %s", got.Status, got.Reason, got.Message, tc.status, tc.reason)
			}
			if got.Safe() != (tc.status == True) {
				t.Errorf("Safe() = %v for %s", got.Safe(), got.Status)
			}
			for _, part := range tc.says {
				if !strings.Contains(got.Message, part) {
					t.Errorf("message %q lacks %q", got.Message, part)
				}
			}
		})
	}
}
