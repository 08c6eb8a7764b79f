package auditpolicy

import (
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/report"
)

const (
	// NamePrefix starts the name of the ValidatingAdmissionPolicy and binding of an AuditPolicy.
	NamePrefix = "celaudit-"
	// LabelAuditPolicy is on the ValidatingAdmissionPolicy and binding celaudit registers for an AuditPolicy;
	// its value is the AuditPolicy's name. It is for selecting them only: anyone who may edit an object may
	// edit its labels, so what celaudit owns is decided by the controller ownerReference (see ControllerOf).
	LabelAuditPolicy = "audit.celaudit.io/auditpolicy"
	// kindAuditPolicy is the kind an owner reference to an AuditPolicy names.
	kindAuditPolicy = "AuditPolicy"
	// AnnotationDescription carries spec.description on the registered policy.
	AnnotationDescription = "audit.celaudit.io/description"
)

// AdmissionName returns the name of the ValidatingAdmissionPolicy and binding of the AuditPolicy named name.
func AdmissionName(name string) string { return NamePrefix + name }

// Actions returns the binding's validationActions for an enforcement: Audit evaluates without enforcing.
func Actions(e v1alpha1.Enforcement) []admissionregistrationv1.ValidationAction {
	switch e {
	case v1alpha1.Warn:
		return []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}
	case v1alpha1.Deny:
		return []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	}
	return []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
}

// Admission is the ValidatingAdmissionPolicy and binding an AuditPolicy stands for.
type Admission struct {
	Policy  *admissionregistrationv1.ValidatingAdmissionPolicy
	Binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// ToAdmission returns the pair ap stands for, as celaudit audits it: with the validationActions of its
// enforcement, and leaving out the namespaces and resources exempt from every pair celaudit registers, so
// that the audit counts what enforcing it would judge. The objects carry the name, labels and annotations
// celaudit registers them with, and ap's uid and generation so that their compilation is cached like a
// policy's; Owned strips what the API server sets before they are written. Nothing of ap is shared with the
// result.
func ToAdmission(ap *v1alpha1.AuditPolicy, ex Exemptions) Admission {
	a := toAdmission(ap)
	ex.apply(a, false)
	return a
}

// toAdmission is the pair ap stands for as written, without the exemptions.
func toAdmission(ap *v1alpha1.AuditPolicy) Admission {
	name := AdmissionName(ap.Name)
	spec := ap.Spec.DeepCopy()
	labels := map[string]string{LabelAuditPolicy: ap.Name, report.ManagedByLabel: report.ManagedByValue}
	annotations := map[string]string{}
	// celaudit's own annotations on the AuditPolicy (rescan, resync interval) steer its audit as they steer a
	// policy's; the spec's report metadata overrides theirs.
	for k, v := range ap.Annotations {
		if strings.HasPrefix(k, audit.AnnotationPrefix) {
			annotations[k] = v
		}
	}
	if spec.Category != "" {
		annotations[audit.AnnotationCategory] = spec.Category
	}
	if spec.Severity != "" {
		annotations[audit.AnnotationSeverity] = spec.Severity
	}
	if spec.Description != "" {
		annotations[AnnotationDescription] = spec.Description
	}
	if spec.ExpandPodTemplates {
		annotations[audit.AnnotationExpandPodTemplates] = "true"
	}
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: name, UID: ap.UID, Generation: ap.Generation,
			Labels: cloneMap(labels), Annotations: cloneMap(annotations),
		}
	}
	return Admission{
		Policy: &admissionregistrationv1.ValidatingAdmissionPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
			ObjectMeta: meta(),
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				ParamKind:        spec.ParamKind,
				MatchConstraints: spec.MatchConstraints,
				Validations:      spec.Validations,
				FailurePolicy:    spec.FailurePolicy,
				AuditAnnotations: spec.AuditAnnotations,
				MatchConditions:  spec.MatchConditions,
				Variables:        spec.Variables,
			},
		},
		Binding: &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
			ObjectMeta: meta(),
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        name,
				ParamRef:          spec.ParamRef,
				MatchResources:    spec.MatchResources,
				ValidationActions: Actions(ap.EnforcementOrDefault()),
			},
		},
	}
}

// Owned returns the pair celaudit registers with the API server for ap: ToAdmission's, whose policy also
// leaves out the requests of the exempt users and groups (a matchCondition), owned by ap (so that the
// garbage collector removes it with ap) and without the uid and generation the API server assigns.
func Owned(ap *v1alpha1.AuditPolicy, ex Exemptions) Admission {
	a := toAdmission(ap)
	ex.apply(a, true)
	owner := metav1.OwnerReference{
		APIVersion: v1alpha1.GroupVersion.String(),
		Kind:       kindAuditPolicy,
		Name:       ap.Name,
		UID:        ap.UID,
		Controller: ptr.To(true),
	}
	for _, m := range []*metav1.ObjectMeta{&a.Policy.ObjectMeta, &a.Binding.ObjectMeta} {
		m.UID, m.Generation = "", 0
		m.OwnerReferences = []metav1.OwnerReference{owner}
	}
	return a
}

// ControllerOf returns obj's controller ownerReference when it names an AuditPolicy, nil otherwise. The
// AuditPolicy owns obj only if it exists with the reference's UID: a reference is as easy to write as a label,
// so the caller checks (see OwnerAmong, metav1.IsControlledBy).
func ControllerOf(obj metav1.Object) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != kindAuditPolicy {
		return nil
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != v1alpha1.GroupVersion.Group {
		return nil
	}
	return ref
}

// OwnerAmong returns the AuditPolicy of aps that owns obj: the one its controller ownerReference names by
// UID. nil when none does.
func OwnerAmong(obj metav1.Object, aps []*v1alpha1.AuditPolicy) *v1alpha1.AuditPolicy {
	ref := ControllerOf(obj)
	if ref == nil {
		return nil
	}
	for _, ap := range aps {
		if ap.UID == ref.UID && ap.Name == ref.Name {
			return ap
		}
	}
	return nil
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
