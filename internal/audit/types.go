package audit

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Source is the value of every result's source field.
const Source = "celaudit"

// Verdict is the outcome of one rule for one object, as PolicyReports spell it.
type Verdict string

// The verdicts of the PolicyReport API. Rule failures are values of this type, never Go errors.
const (
	Pass  Verdict = "pass"
	Fail  Verdict = "fail"
	Warn  Verdict = "warn"
	Error Verdict = "error"
	Skip  Verdict = "skip"
)

// Severities of the PolicyReport API.
const (
	SeverityCritical = "critical"
	SeverityHigh     = "high"
	SeverityMedium   = "medium"
	SeverityLow      = "low"
	SeverityInfo     = "info"
)

// Property keys shared by the rule sources.
const (
	PropResultID          = "resultID"
	PropRule              = "rule"
	PropFieldPath         = "fieldPath"
	PropReason            = "reason"
	PropCRDVersion        = "crdVersion"
	PropBinding           = "binding"
	PropParam             = "param"
	PropValidationActions = "validationActions"
	PropOperation         = "operation"
	PropFailurePolicy     = "failurePolicy"
	// PropPodTemplate is "true" on a result of a Pod rule evaluated against a workload's pod template (see
	// AnnotationExpandPodTemplates). It tells these results from the rule's results on the workload itself,
	// and gives them IDs of their own.
	PropPodTemplate = "podTemplate"
	// PropPolicyKind is the kind of the object a published result's policy comes from (see
	// PolicySource.Kind): readers tell a CRD from a ValidatingAdmissionPolicy or an AuditPolicy of the same
	// name by it, not by the name or the other properties.
	PropPolicyKind = "policyKind"
)

// ObjectRef identifies an audited object in the version it was read in.
type ObjectRef struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	UID        types.UID
}

// RefOf returns the reference of obj.
func RefOf(obj *unstructured.Unstructured) ObjectRef {
	return ObjectRef{
		APIVersion: obj.GetAPIVersion(),
		Kind:       obj.GetKind(),
		Namespace:  obj.GetNamespace(),
		Name:       obj.GetName(),
		UID:        obj.GetUID(),
	}
}

// Result is one row of a report: the verdict of one rule (or of a whole policy, for a pass) on one object.
//
// Results must be deterministic: evaluating the same rule on the same object yields an identical Result, so
// that an unchanged cluster produces byte-identical reports.
type Result struct {
	// Policy and PolicySource are the key of the policy the result comes from: its name, and the kind of
	// object it is compiled from, which reports publish as the property PropPolicyKind.
	Policy       string
	PolicySource PolicySource
	Rule         string
	Category     string
	Severity     string
	Verdict      Verdict
	Message      string
	Properties   map[string]string
	Resource     ObjectRef
}

// Policy is a compiled source of rules. Compilation happens once, when the policy is built; Evaluate is
// called for every object of every resource the policy lists and must not panic on any stored object.
type Policy interface {
	// Key identifies the policy among every source. Results are stored and replaced per (policy key,
	// resource, object); each result's Policy is the key's Name.
	Key() PolicyKey
	// Resources lists the resources, in the version to read them in, whose objects the policy evaluates.
	Resources() []schema.GroupVersionResource
	// Evaluate returns the results for obj, read at gvr. It returns at least one result for every object it
	// covers (a pass when nothing failed) and none for objects it does not cover.
	//
	// Results on one object with equal verdicts have distinct rule names (see RuleName and DistinctRules).
	Evaluate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) []Result
}

// Classified is implemented by policies whose results carry a category and severity of their own. Results
// made for such a policy outside Evaluate (a resource that cannot be read) carry the same, so that readers
// file them with the policy's other results.
type Classified interface {
	Category() string
	Severity() string
}

// ClassOf returns the category and severity of p's results, empty when p is not Classified.
func ClassOf(p Policy) (category, severity string) {
	if c, ok := p.(Classified); ok {
		return c.Category(), c.Severity()
	}
	return "", ""
}
