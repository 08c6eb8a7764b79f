// Package v1alpha2 contains the Go types of the wgpolicyk8s.io/v1alpha2 API: PolicyReport and
// ClusterPolicyReport, as defined by the Kubernetes Policy Working Group.
//
// celaudit does not own this API: the types mirror the upstream CRD field for field, so that the reports it
// writes are read unchanged by existing consumers (kubectl, Policy Reporter and its dashboards, metrics
// exporters). Any change here must keep the generated CRD schema equal to upstream's in fields, enums,
// required fields and printer columns.
//
// +kubebuilder:object:generate=true
// +groupName=wgpolicyk8s.io
package v1alpha2
