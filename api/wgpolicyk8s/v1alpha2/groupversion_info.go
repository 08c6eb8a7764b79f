package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the PolicyReport API.
	GroupVersion = schema.GroupVersion{Group: "wgpolicyk8s.io", Version: "v1alpha2"}

	// SchemeBuilder registers the PolicyReport types with a runtime.Scheme. It depends on apimachinery only,
	// so that consumers of the API types do not pull in controller-runtime.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the PolicyReport types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &PolicyReport{}, &PolicyReportList{}, &ClusterPolicyReport{}, &ClusterPolicyReportList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
