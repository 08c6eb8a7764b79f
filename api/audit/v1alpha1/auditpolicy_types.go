package v1alpha1

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Enforcement says what an AuditPolicy does with the objects that break it. The stages are ordered: a policy
// is rolled out from Audit to Warn to Deny.
type Enforcement string

const (
	// Audit evaluates the policy in celaudit only: its violations are reported as warn results and nothing is
	// registered with the API server.
	Audit Enforcement = "Audit"
	// Warn registers a ValidatingAdmissionPolicy and binding with validationActions [Warn]: the API server
	// returns a warning for each violating write, and celaudit reports violations as warn results.
	Warn Enforcement = "Warn"
	// Deny registers a ValidatingAdmissionPolicy and binding with validationActions [Deny]: the API server
	// rejects violating writes, and celaudit reports the violations already stored as fail results.
	Deny Enforcement = "Deny"
)

// Stage returns the position of e in the rollout (Audit 0, Warn 1, Deny 2), or -1 for an unknown value.
func (e Enforcement) Stage() int {
	switch e {
	case Audit, "":
		return 0
	case Warn:
		return 1
	case Deny:
		return 2
	}
	return -1
}

// PromotionCondition is what must hold for a promotion.
type PromotionCondition string

// NoViolations holds while SafeToEnforce is True: the last complete audit judged objects and found no fail, warn or
// error result.
const NoViolations PromotionCondition = "NoViolations"

// Promotion moves an AuditPolicy's enforcement forward by itself once it has been safe for a while.
//
// +kubebuilder:validation:XValidation:rule="self.to in ['Warn', 'Deny']",message="promotion.to must be Warn or Deny"
type Promotion struct {
	// To is the enforcement to move to.
	// +required
	To Enforcement `json:"to"`
	// When is the condition that must hold; NoViolations is the only one.
	// +kubebuilder:default=NoViolations
	// +kubebuilder:validation:XValidation:rule="self == 'NoViolations'",message="promotion.when must be NoViolations"
	// +optional
	When PromotionCondition `json:"when,omitempty"`
	// For is how long the condition must have held, e.g. 24h.
	// +required
	For metav1.Duration `json:"for"`
}

// EnforcementOverride is an explicit, recorded decision to enforce a policy that celaudit does not judge safe.
type EnforcementOverride struct {
	// Reason says why the policy is enforced anyway, and who decided it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Reason string `json:"reason"`
}

// Exemptions are what every ValidatingAdmissionPolicy and binding celaudit registers leaves out, whatever the
// AuditPolicy says, so that enforcing it can deny nothing that keeps the cluster or celaudit running. The
// audit of an AuditPolicy leaves out the same namespaces and resources; users and groups concern requests
// only.
type Exemptions struct {
	// Namespaces are left out through the binding's namespaceSelector.
	// +listType=atomic
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// Resources are left out through the binding's excludeResourceRules, subresources included, as
	// group/resource ("" group written as "/events" is core; "*" stands for every resource of the group).
	// +listType=atomic
	// +optional
	Resources []string `json:"resources,omitempty"`
	// Users are the request users a matchCondition of the registered policy leaves out.
	// +listType=atomic
	// +optional
	Users []string `json:"users,omitempty"`
	// Groups are the request groups a matchCondition of the registered policy leaves out.
	// +listType=atomic
	// +optional
	Groups []string `json:"groups,omitempty"`
}

// AuditPolicySpec is the body of a ValidatingAdmissionPolicy, the paramRef and matchResources of its binding,
// report metadata and the enforcement. The admissionregistration.k8s.io/v1 fields keep their names and
// meaning.
type AuditPolicySpec struct {
	// ParamKind is the ValidatingAdmissionPolicy's paramKind.
	// +optional
	ParamKind *admissionregistrationv1.ParamKind `json:"paramKind,omitempty"`
	// MatchConstraints is the ValidatingAdmissionPolicy's matchConstraints: the resources the policy covers.
	// +required
	MatchConstraints *admissionregistrationv1.MatchResources `json:"matchConstraints"`
	// Validations are the ValidatingAdmissionPolicy's validations.
	// +listType=atomic
	// +required
	Validations []admissionregistrationv1.Validation `json:"validations"`
	// FailurePolicy is the ValidatingAdmissionPolicy's failurePolicy (default Fail).
	// +optional
	FailurePolicy *admissionregistrationv1.FailurePolicyType `json:"failurePolicy,omitempty"`
	// AuditAnnotations are the ValidatingAdmissionPolicy's auditAnnotations.
	// +listType=atomic
	// +optional
	AuditAnnotations []admissionregistrationv1.AuditAnnotation `json:"auditAnnotations,omitempty"`
	// MatchConditions are the ValidatingAdmissionPolicy's matchConditions. At most 63: the registered policy
	// adds one of its own that exempts the identities celaudit never denies (the API server allows 64).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=63
	// +optional
	MatchConditions []admissionregistrationv1.MatchCondition `json:"matchConditions,omitempty"`
	// Variables are the ValidatingAdmissionPolicy's variables.
	// +listType=atomic
	// +optional
	Variables []admissionregistrationv1.Variable `json:"variables,omitempty"`

	// ParamRef is the binding's paramRef. It requires paramKind.
	// +optional
	ParamRef *admissionregistrationv1.ParamRef `json:"paramRef,omitempty"`
	// MatchResources is the binding's matchResources: it narrows matchConstraints.
	// +optional
	MatchResources *admissionregistrationv1.MatchResources `json:"matchResources,omitempty"`

	// Category is the category of the policy's results in reports.
	// +optional
	Category string `json:"category,omitempty"`
	// Severity is the severity of the policy's results in reports.
	// +kubebuilder:validation:Enum=critical;high;medium;low;info
	// +optional
	Severity string `json:"severity,omitempty"`
	// Description says what the policy is for.
	// +optional
	Description string `json:"description,omitempty"`

	// Enforcement is Audit (celaudit evaluates the policy, the API server does not know it), Warn or Deny
	// (celaudit registers a ValidatingAdmissionPolicy and binding with that action and owns them).
	// +kubebuilder:default=Audit
	// +kubebuilder:validation:XValidation:rule="self in ['Audit', 'Warn', 'Deny']",message="enforcement must be Audit, Warn or Deny"
	// +optional
	Enforcement Enforcement `json:"enforcement,omitempty"`
	// EnforcementOverride, when set, registers the pair for Warn or Deny although celaudit does not judge it
	// safe (SafeToEnforce is not True for this generation, or a configuration error would make the API server
	// deny every matched write). Its reason is recorded in the Enforced condition and a Warning Event.
	// +optional
	EnforcementOverride *EnforcementOverride `json:"enforcementOverride,omitempty"`
	// Promotion, when set, moves enforcement forward by itself once the policy has been safe to enforce for a
	// while. It never moves enforcement backwards.
	// +optional
	Promotion *Promotion `json:"promotion,omitempty"`
	// ExpandPodTemplates evaluates validations that match Pods also against the pod templates of
	// Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs and CronJobs, as the Pod their controller
	// would create.
	// +optional
	ExpandPodTemplates bool `json:"expandPodTemplates,omitempty"`
}

// NamespaceViolations is the number of violations in one namespace.
type NamespaceViolations struct {
	// Namespace is the namespace; empty for cluster-scoped objects.
	Namespace string `json:"namespace"`
	// Violations is the number of fail and warn results in the namespace.
	Violations int64 `json:"violations"`
}

// AuditPolicyStatus is what celaudit observed of an AuditPolicy.
type AuditPolicyStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions are Compiled, Enforced and SafeToEnforce.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Matched is the number of objects the policy judges: those with at least one result. An object its
	// matchConditions exclude is not counted, as the API server admits it without evaluating the policy.
	// +optional
	Matched int64 `json:"matched"`
	// Pass, Fail, Warn, Error and Skip count the policy's results by verdict.
	// +optional
	Pass int64 `json:"pass"`
	// +optional
	Fail int64 `json:"fail"`
	// +optional
	Warn int64 `json:"warn"`
	// +optional
	Error int64 `json:"error"`
	// +optional
	Skip int64 `json:"skip"`
	// Violations is the number of fail and warn results.
	// +optional
	Violations int64 `json:"violations"`
	// TopNamespaces are the (up to 10) namespaces with most violations, most first.
	// +listType=atomic
	// +optional
	TopNamespaces []NamespaceViolations `json:"topNamespaces,omitempty"`
	// LastAuditTime is when the counts were last taken from a complete audit.
	// +optional
	LastAuditTime *metav1.Time `json:"lastAuditTime,omitempty"`
	// AdmissionPolicy names the ValidatingAdmissionPolicy (and binding) celaudit registers for Warn and Deny.
	// +optional
	AdmissionPolicy string `json:"admissionPolicy,omitempty"`
	// Exemptions are what the registered pair and the audit leave out.
	// +optional
	Exemptions *Exemptions `json:"exemptions,omitempty"`
}

// Condition types of an AuditPolicy.
const (
	// ConditionCompiled is True when every expression compiles; False lists the compiler's messages, and
	// the policy then yields no results.
	ConditionCompiled = "Compiled"
	// ConditionEnforced is True when the ValidatingAdmissionPolicy and binding for Warn or Deny exist and
	// match the spec, False when they should and do not, and False with reason Audit when none is wanted.
	ConditionEnforced = "Enforced"
	// ConditionSafeToEnforce is True when the last complete audit of this generation judged at least one
	// object and found no fail, warn or error result; Unknown when it judged nothing, could not judge some
	// covered objects (skips, subresources, unreadable or unaudited resources) or has not completed yet.
	// Only True lets the policy be registered for Deny or promoted.
	ConditionSafeToEnforce = "SafeToEnforce"
)

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=auditpolicies,scope=Cluster,shortName=ap,categories=celaudit
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Enforcement",type=string,JSONPath=`.spec.enforcement`
// +kubebuilder:printcolumn:name="Matched",type=integer,JSONPath=`.status.matched`
// +kubebuilder:printcolumn:name="Violations",type=integer,JSONPath=`.status.violations`
// +kubebuilder:printcolumn:name="Errors",type=integer,JSONPath=`.status.error`
// +kubebuilder:printcolumn:name="SafeToEnforce",type=string,JSONPath=`.status.conditions[?(@.type=="SafeToEnforce")].status`
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="the name must be at most 63 characters: it is the value of the label that selects the ValidatingAdmissionPolicy and binding celaudit registers for it"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.paramRef) || has(self.spec.paramKind)",message="spec.paramRef requires spec.paramKind"
// +kubebuilder:validation:XValidation:rule="size(self.spec.validations) > 0",message="spec.validations must hold at least one validation"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.promotion) || self.spec.promotion.to == 'Deny' || !has(self.spec.enforcement) || self.spec.enforcement != 'Deny'",message="spec.promotion.to must not come before spec.enforcement"

// AuditPolicy is a ValidatingAdmissionPolicy with its binding, rolled out in stages: audited by celaudit
// only, then registered with the API server to warn, then to deny.
type AuditPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec AuditPolicySpec `json:"spec"`
	// +optional
	Status AuditPolicyStatus `json:"status,omitempty"`
}

// FinalizerAdmissionPolicy is on an AuditPolicy while celaudit may have a ValidatingAdmissionPolicy and binding
// registered for it: deleting the AuditPolicy removes them first, even when no garbage collector runs.
const FinalizerAdmissionPolicy = "audit.celaudit.io/admission-policy"

// EnforcementOrDefault returns the enforcement, Audit when it is not set.
func (p *AuditPolicy) EnforcementOrDefault() Enforcement {
	if p.Spec.Enforcement == "" {
		return Audit
	}
	return p.Spec.Enforcement
}

// +kubebuilder:object:root=true

// AuditPolicyList contains a list of AuditPolicy.
type AuditPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AuditPolicy `json:"items"`
}
