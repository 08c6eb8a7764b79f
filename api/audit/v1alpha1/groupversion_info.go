package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the AuditPolicy API.
	GroupVersion = schema.GroupVersion{Group: "audit.celaudit.io", Version: "v1alpha1"}

	// SchemeBuilder registers the AuditPolicy types with a runtime.Scheme. It depends on apimachinery only,
	// so that consumers of the API types do not pull in controller-runtime.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the AuditPolicy types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &AuditPolicy{}, &AuditPolicyList{}, &AuditShard{}, &AuditShardList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
