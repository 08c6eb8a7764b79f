package whatif

import (
	"context"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/vap"
)

// Values of the onUpdate property of a result that rejects: what the API server does with the object's next UPDATE.
const (
	// OnUpdateRejected: the update is rejected even when it leaves the object unchanged (a no-op patch, a
	// storage version migration).
	OnUpdateRejected = "rejected"
	// OnUpdateRatcheted: an update that leaves the failing field unchanged passes, by CRD validation
	// ratcheting; one that changes it to another invalid value is rejected.
	OnUpdateRatcheted = "ratcheted"
	// OnUpdateAllowed: the policy's bindings do not match updates of the object: only creates are rejected.
	OnUpdateAllowed = "allowed"
)

// crdJudge runs the CRD's upstream validation as a no-op UPDATE (old object = the stored object), with
// ratcheting as the API server runs it: a failure whose error remains is rejected, one whose error is gone
// is ratcheted.
type crdJudge struct {
	policy updateValidator
}

// updateValidator validates an update of an object as the API server validates it against a CRD, with
// ratcheting: *crdrules.Policy.
type updateValidator interface {
	UpdateErrors(ctx context.Context, version string, obj, old *unstructured.Unstructured) ([]string, error)
}

var _ updateJudge = crdJudge{}

func (j crdJudge) onUpdate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, failing []audit.Result) []string {
	out := make([]string, len(failing))
	remaining, err := j.policy.UpdateErrors(ctx, gvr.Version, obj, obj)
	if err != nil {
		return out // undecided: the validation could not run
	}
	for i, r := range failing {
		out[i] = OnUpdateRatcheted
		if slices.Contains(remaining, r.Message) {
			out[i] = OnUpdateRejected
		}
	}
	return out
}

// vapJudge evaluates the object with the proposed policy and bindings narrowed to UPDATE requests, which the
// vap package audits as an UPDATE whose old object is the object itself: a denial that remains is rejected,
// one that does not (the bindings do not match updates, or a rule reading oldObject passes) is allowed.
type vapJudge struct {
	update audit.Policy // nil: the policy matches no update
}

var _ updateJudge = vapJudge{}

// newVAPJudge returns the judge of compiled, the ValidatingAdmissionPolicy named name bound to bindings: the
// same compiled expressions, with the policy's rules and its bindings narrowed to UPDATE requests.
func newVAPJudge(compiled *vap.Compiled, name string, bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding, views engine.Views) vapJudge {
	constraints := compiled.MatchConstraints()
	if constraints == nil || !updatesOnly(constraints) {
		return vapJudge{}
	}
	var narrowed []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, b := range bindings {
		if b.Spec.PolicyName != name {
			continue
		}
		b = b.DeepCopy()
		if b.Spec.MatchResources == nil || updatesOnly(b.Spec.MatchResources) {
			narrowed = append(narrowed, b)
		}
	}
	if len(narrowed) == 0 {
		return vapJudge{}
	}
	return vapJudge{update: engine.Bind(compiled.WithMatchConstraints(constraints), narrowed, views)}
}

// updatesOnly narrows the resource rules of m to the UPDATE operation, and reports whether m still matches
// something: false when it had rules and none named UPDATE. Empty rules (a binding's "every resource of the
// policy") and the exclusions are left as they are.
func updatesOnly(m *admissionregistrationv1.MatchResources) bool {
	if len(m.ResourceRules) == 0 {
		return true
	}
	var kept []admissionregistrationv1.NamedRuleWithOperations
	for _, r := range m.ResourceRules {
		if slices.Contains(r.Operations, admissionregistrationv1.OperationAll) || slices.Contains(r.Operations, admissionregistrationv1.Update) {
			r.Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
			kept = append(kept, r)
		}
	}
	m.ResourceRules = kept
	return len(kept) > 0
}

func (j vapJudge) onUpdate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, failing []audit.Result) []string {
	out := make([]string, len(failing))
	var denials []audit.Result
	if j.update != nil {
		for _, r := range engine.NewObject(gvr, obj).Evaluate(ctx, j.update) {
			if Rejects(r) {
				denials = append(denials, r)
			}
		}
	}
	for i, r := range failing {
		out[i] = OnUpdateAllowed
		if slices.ContainsFunc(denials, func(d audit.Result) bool { return sameDenial(r, d) }) {
			out[i] = OnUpdateRejected
		}
	}
	return out
}

// sameDenial reports whether two rejecting results are the same denial of one object, whatever operation
// they were evaluated as.
func sameDenial(a, b audit.Result) bool {
	return a.Verdict == b.Verdict && a.Rule == b.Rule && a.Message == b.Message &&
		a.Properties[audit.PropBinding] == b.Properties[audit.PropBinding] &&
		a.Properties[audit.PropParam] == b.Properties[audit.PropParam] &&
		a.Properties[audit.PropPodTemplate] == b.Properties[audit.PropPodTemplate]
}
