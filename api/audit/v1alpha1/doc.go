// Package v1alpha1 contains the Go types of celaudit's own audit.celaudit.io/v1alpha1 API: the AuditPolicy, a
// ValidatingAdmissionPolicy and its binding in one object, with an enforcement lifecycle (Audit → Warn → Deny).
//
// The spec reuses the admissionregistration.k8s.io/v1 types field for field and under the same JSON names, so
// that a policy and binding pair converts to an AuditPolicy by moving fields, and back.
//
// +kubebuilder:object:generate=true
// +groupName=audit.celaudit.io
package v1alpha1
