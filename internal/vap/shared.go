package vap

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/client-go/informers"
)

// NewMatcher returns the apiserver's resource matcher reading namespaces from namespaces, through the same
// adapters the ValidatingAdmissionPolicy audit uses. The mutating policy audit (internal/mutate) matches with
// it, so that both read a stored object's namespace alike.
func NewMatcher(namespaces NamespaceGetter) *matching.Matcher {
	lister := namespaceLister{getter: namespaces}
	return matching.NewMatcher(lister, namespaceClient{lister: lister})
}

// NewParamInformer adapts source, for params of kind gvk, to the informer the apiserver's
// generic.CollectParams reads; it is always synced (readiness is the source's concern).
func NewParamInformer(source ParamSource, gvk schema.GroupVersionKind) informers.GenericInformer {
	return paramInformer{source: source, gvk: gvk}
}

// ResourceLevel returns m without its object-level criteria (selectors, resourceNames), for deciding which
// resources a policy can apply to at all; the mutating policy audit plans its reads with it as this package
// does.
func ResourceLevel(m *admissionregistrationv1.MatchResources) *admissionregistrationv1.MatchResources {
	return resourceLevel(m)
}

// ReportResource reports whether gr is one of the report resources celaudit writes: a policy covers them
// only when one of its rules names them literally, so that no audit judges its own output by a wildcard.
func ReportResource(gr schema.GroupResource) bool { return ownReport(gr) }

// NamesReports reports whether a resource rule of ms names one of celaudit's report resources literally.
func NamesReports(ms ...*admissionregistrationv1.MatchResources) bool { return namesOwnReports(ms...) }
