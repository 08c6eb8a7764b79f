package vap

import (
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
