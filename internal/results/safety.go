package results

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons of a Safety: the reason of the SafeToEnforce condition and of the readiness Events.
const (
	// SafetyNoViolations: the audit judged objects and none fails, warns or errors (True).
	SafetyNoViolations = "NoViolations"
	// SafetyViolations: some object fails, warns or errors (False).
	SafetyViolations = "Violations"
	// SafetyAuditPending: no complete audit of the policy as it is now (Unknown).
	SafetyAuditPending = "AuditPending"
	// SafetySubresources: the policy covers subresources, whose requests an audit of stored objects cannot
	// judge (Unknown).
	SafetySubresources = "Subresources"
	// SafetyResourcesNotJudged: some covered resource cannot be read or is not audited (Unknown).
	SafetyResourcesNotJudged = "ResourcesNotJudged"
	// SafetySkipped: some results are skips, typically of validations that read the request (request.userInfo,
	// oldObject), which an audit cannot simulate (Unknown).
	SafetySkipped = "Skipped"
	// SafetyNothingJudged: the policy matched no stored object (Unknown).
	SafetyNothingJudged = "NothingJudged"
)

// Safety answers whether a policy may be enforced: True only when a complete audit judged at least one object
// and none fails, warns or errors; False when some does; Unknown when the audit cannot tell, which is never
// taken for safe.
type Safety struct {
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

// Safe reports whether the status is True.
func (s Safety) Safe() bool { return s.Status == metav1.ConditionTrue }

// SafetyOf judges the summary s of a policy. Skips are of what no audit of stored objects can decide (objects a
// matchCondition excludes have no result at all). complete says that s is from a complete audit of the policy
// as it is now; subresources are the subresources its rules cover ("deployments/scale", "*/*"), none for a
// policy that covers none.
//
// Violations decide first: a fail, warn or error on some object is False whatever else is unknown. Without
// them the answer is Unknown when something covered was not judged, the reason naming the first of: the audit
// is pending, subresources, resources that cannot be read or are not audited, skips, nothing matched. The
// message says everything that was not judged.
func SafetyOf(s Summary, complete bool, subresources []string) Safety {
	if !complete {
		return Safety{Status: metav1.ConditionUnknown, Reason: SafetyAuditPending,
			Message: "the first complete audit of the policy as it is now is in progress"}
	}
	if objectErrors := s.Error - s.ResourceErrors; s.Fail > 0 || s.Warn > 0 || objectErrors > 0 {
		return Safety{Status: metav1.ConditionFalse, Reason: SafetyViolations,
			Message: fmt.Sprintf("%d of %d matched objects violate the policy; %d fail, %d warn and %d error results",
				s.Violating, s.Matched, s.Fail, s.Warn, objectErrors)}
	}
	var reason string
	var unknown []string
	note := func(r, msg string) {
		if reason == "" {
			reason = r
		}
		unknown = append(unknown, msg)
	}
	if len(subresources) > 0 {
		note(SafetySubresources, fmt.Sprintf("the policy covers subresources (%s): requests to them write no stored object, so no audit judges them",
			strings.Join(subresources, ", ")))
	}
	if s.Resources > 0 {
		note(SafetyResourcesNotJudged, fmt.Sprintf("%d results say that a covered resource cannot be read or is not audited, so its objects are not judged", s.Resources))
	}
	if s.Skip > 0 {
		note(SafetySkipped, fmt.Sprintf("%d results are skips: the policy depends on the request (request.userInfo, oldObject, a DELETE), which an audit of stored objects cannot simulate", s.Skip))
	}
	if s.Judged == 0 {
		note(SafetyNothingJudged, "the policy's validations judged no stored object (none matched, or its matchConditions exclude every one)")
	}
	if len(unknown) > 0 {
		return Safety{Status: metav1.ConditionUnknown, Reason: reason,
			Message: fmt.Sprintf("%d matched objects, no fail, warn or error result, but not everything was judged: %s", s.Matched, strings.Join(unknown, "; "))}
	}
	return Safety{Status: metav1.ConditionTrue, Reason: SafetyNoViolations,
		Message: fmt.Sprintf("no fail, warn or error result among the %d matched objects (%d judged)", s.Matched, s.Judged)}
}
