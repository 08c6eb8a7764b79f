package envtestutil

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/auditpolicy"
)

// AuditPolicyFor returns the AuditPolicy named name that stands for policy and binding (the binding may be
// nil) with enforcement e, so that tests and benchmarks can audit their ValidatingAdmissionPolicy fixtures
// as AuditPolicies too: the reverse of auditpolicy.ToAdmission for a pair without exemptions. Category,
// severity, description and the expansion of pod templates come from the policy's annotations.
func AuditPolicyFor(name string, policy *admissionregistrationv1.ValidatingAdmissionPolicy,
	binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding, e v1alpha1.Enforcement) *v1alpha1.AuditPolicy {
	p := policy.DeepCopy()
	a := audit.ParseAnnotations(p.Annotations)
	ap := &v1alpha1.AuditPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AuditPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.AuditPolicySpec{
			ParamKind:          p.Spec.ParamKind,
			MatchConstraints:   p.Spec.MatchConstraints,
			Validations:        p.Spec.Validations,
			FailurePolicy:      p.Spec.FailurePolicy,
			AuditAnnotations:   p.Spec.AuditAnnotations,
			MatchConditions:    p.Spec.MatchConditions,
			Variables:          p.Spec.Variables,
			Category:           a.Category,
			Severity:           a.Severity,
			Description:        p.Annotations[auditpolicy.AnnotationDescription],
			Enforcement:        e,
			ExpandPodTemplates: a.ExpandPodTemplates,
		},
	}
	if binding != nil {
		b := binding.DeepCopy()
		ap.Spec.ParamRef = b.Spec.ParamRef
		ap.Spec.MatchResources = b.Spec.MatchResources
	}
	return ap
}

// EnforcementOf returns the enforcement a binding's validationActions stand for: Deny if they deny, Warn if
// they warn, Audit otherwise.
func EnforcementOf(actions []admissionregistrationv1.ValidationAction) v1alpha1.Enforcement {
	e := v1alpha1.Audit
	for _, a := range actions {
		switch a {
		case admissionregistrationv1.Deny:
			return v1alpha1.Deny
		case admissionregistrationv1.Warn:
			e = v1alpha1.Warn
		}
	}
	return e
}
