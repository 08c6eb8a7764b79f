package vap

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
)

// NamespaceGetter returns a namespace by name, as a client-go namespace lister does. A missing namespace must be
// reported with an apierrors NotFound error: the apiserver's namespaceSelector matching depends on it. The
// evaluation only reads the namespace, so a getter may hand out a shared cached object, as listers do.
type NamespaceGetter interface {
	Get(name string) (*corev1.Namespace, error)
}

// ParamSource reads the parameter objects of a policy's paramKind, typically from an informer cache the
// controller keeps for every kind returned by Policy.ParamKinds. namespace is empty for cluster-scoped kinds.
//
// Get must return an apierrors NotFound error for a missing object (parameterNotFoundAction then applies);
// any other error becomes an error result. Whether the kind is installed at all is decided by the
// ResourceResolver, as the apiserver decides it with its RESTMapper.
type ParamSource interface {
	Get(gvk schema.GroupVersionKind, namespace, name string) (runtime.Object, error)
	List(gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]runtime.Object, error)
}

// ParamWithholder is implemented by a ParamSource that never reads params of some kinds (celaudit reads
// Secrets only when asked to). A binding whose paramRef would read params of such a kind is not evaluated:
// each object it matches gets an error result with the reason instead, whatever its parameterNotFoundAction,
// since neither "found" nor "not found" would be true. Bindings without a paramRef read no params and are
// evaluated as usual.
type ParamWithholder interface {
	// ParamsWithheld returns why params of kind gvk are never read, nil when they are read.
	ParamsWithheld(gvk schema.GroupVersionKind) error
}

// ParamFailer is implemented by a ParamSource that may fail to read params of a kind for a while (celaudit
// may not be allowed to list them). A binding whose paramRef reads such params is not evaluated: each object
// it matches gets an error result with the reason instead, whatever its parameterNotFoundAction, as for a
// ParamWithholder; the source has the policy audited again once it can read them.
type ParamFailer interface {
	// ParamsFailing returns why params of kind gvk, in namespace ("" for a cluster-scoped kind), cannot be
	// read now, nil when they can.
	ParamsFailing(gvk schema.GroupVersionKind, namespace string) error
}

// APIResource is one served top-level resource.
type APIResource struct {
	Resource   schema.GroupVersionResource
	Kind       string
	Namespaced bool
	// Auditable says whether the resource supports both list and watch: the audit reads stored objects with
	// a LIST and follows their changes with a WATCH. Resources that lack either (componentstatuses has no
	// watch, most virtual resources have no list) have no stored objects to audit.
	Auditable bool
}

// GroupVersionKind returns the kind of the resource's objects.
func (r APIResource) GroupVersionKind() schema.GroupVersionKind {
	return r.Resource.GroupVersion().WithKind(r.Kind)
}

// ResourceResolver knows what the cluster serves: it expands a policy's resource rules into concrete resources,
// gives the resources equivalent to one another (matchPolicy: Equivalent) and maps a paramKind to its resource.
// StaticResolver implements it from discovery output.
type ResourceResolver interface {
	runtime.EquivalentResourceMapper
	// ServedResources lists the served top-level resources (no subresources) in order of preference: within
	// an equivalence class, an earlier entry is preferred as the version to read objects in.
	ServedResources() []APIResource
	// ResourceForKind returns the resource serving gvk, or an error when that kind is not installed (the
	// policy then fails to configure, as in the apiserver).
	ResourceForKind(gvk schema.GroupVersionKind) (APIResource, error)
}

// Deps are the cluster views a policy reads. Resolver is required to list resources; Namespaces is needed
// for namespaceSelectors and the namespaceObject variable; Params for policies with a paramKind. A missing
// dependency turns the evaluations that need it into error results.
type Deps struct {
	Namespaces NamespaceGetter
	Params     ParamSource
	Resolver   ResourceResolver
}

// DefaultCategory is the category of results of policies without the category annotation.
const DefaultCategory = "ValidatingAdmissionPolicy"

// Options configure compilation.
type Options struct {
	// Category of results when the policy has no category annotation; DefaultCategory when empty.
	Category string
	// Severity of results when the policy has no valid severity annotation; audit.SeverityMedium when empty.
	Severity string
	// CompatibilityVersion of the CEL environment; the apiserver's default (that of the linked
	// k8s.io/apiserver) when nil. Stored expressions compile with every library whatever the version.
	CompatibilityVersion *version.Version
}
