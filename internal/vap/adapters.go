package vap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// The apiserver's matching and parameter code reads namespaces and params through client-go listers,
// informers and clients. These adapters present the consumer's small interfaces in those shapes; only the
// methods the upstream code calls are implemented (the embedded interfaces are nil, and a call to anything
// else panics and is recovered as an error result).

// namespaceLister adapts a NamespaceGetter to corelisters.NamespaceLister.
type namespaceLister struct {
	getter NamespaceGetter
}

var _ corelisters.NamespaceLister = namespaceLister{}

func (l namespaceLister) List(labels.Selector) ([]*corev1.Namespace, error) {
	return nil, errors.New("listing namespaces is not supported")
}

func (l namespaceLister) Get(name string) (*corev1.Namespace, error) {
	if l.getter == nil {
		return nil, errors.New("no namespace source configured")
	}
	// Returned unwrapped: the namespace matcher type-asserts apierrors.APIStatus to build the apiserver's
	// NotFound response.
	return l.getter.Get(name)
}

// namespaceClient is the client the namespace matcher falls back to when its lister misses. The getter is
// already the source of truth, so the fallback asks it again.
type namespaceClient struct {
	kubernetes.Interface
	lister namespaceLister
}

func (c namespaceClient) CoreV1() corev1client.CoreV1Interface {
	return namespaceCoreV1{lister: c.lister}
}

type namespaceCoreV1 struct {
	corev1client.CoreV1Interface
	lister namespaceLister
}

func (c namespaceCoreV1) Namespaces() corev1client.NamespaceInterface {
	return namespaceInterface{lister: c.lister}
}

type namespaceInterface struct {
	corev1client.NamespaceInterface
	lister namespaceLister
}

func (n namespaceInterface) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Namespace, error) {
	return n.lister.Get(name)
}

// paramInformer adapts a ParamSource, for one kind, to the informer generic.CollectParams reads.
type paramInformer struct {
	source ParamSource
	gvk    schema.GroupVersionKind
}

var _ informers.GenericInformer = paramInformer{}

func (p paramInformer) Informer() cache.SharedIndexInformer { return syncedInformer{} }

func (p paramInformer) Lister() cache.GenericLister { return paramLister{source: p.source, gvk: p.gvk} }

// syncedInformer reports the ParamSource as synced: readiness is the ParamSource's concern, and it reports
// what it cannot serve as errors.
type syncedInformer struct {
	cache.SharedIndexInformer
}

func (syncedInformer) HasSynced() bool { return true }

type paramLister struct {
	source    ParamSource
	gvk       schema.GroupVersionKind
	namespace string
}

var _ cache.GenericLister = paramLister{}

func (l paramLister) List(selector labels.Selector) ([]runtime.Object, error) {
	if l.source == nil {
		return nil, errors.New("no param source configured")
	}
	return l.source.List(l.gvk, l.namespace, selector)
}

func (l paramLister) Get(name string) (runtime.Object, error) {
	if l.source == nil {
		return nil, errors.New("no param source configured")
	}
	return l.source.Get(l.gvk, l.namespace, name)
}

func (l paramLister) ByNamespace(namespace string) cache.GenericNamespaceLister {
	l.namespace = namespace
	return l
}

// objectInterfaces gives the matcher the equivalent-resource mapper. Objects are read from the API in the
// version the policy evaluates, so nothing is ever converted; a request to convert is reported as an error.
type objectInterfaces struct {
	mapper runtime.EquivalentResourceMapper
}

var _ admission.ObjectInterfaces = objectInterfaces{}

func (o objectInterfaces) GetObjectCreater() runtime.ObjectCreater     { return noConversion{} }
func (o objectInterfaces) GetObjectTyper() runtime.ObjectTyper         { return nil }
func (o objectInterfaces) GetObjectDefaulter() runtime.ObjectDefaulter { return nil }
func (o objectInterfaces) GetObjectConvertor() runtime.ObjectConvertor { return nil }
func (o objectInterfaces) GetEquivalentResourceMapper() runtime.EquivalentResourceMapper {
	return o.mapper
}

type noConversion struct{}

func (noConversion) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	return nil, fmt.Errorf("the object must be read as %v to be evaluated", kind)
}

// wrappedParam gives a typed param without TypeMeta its kind, as the apiserver's dispatcher does (its own
// wrappedParam is unexported): CEL reads params through their unstructured form.
type wrappedParam struct {
	metav1.TypeMeta
	nested runtime.Object
}

// MarshalJSON makes wrappedParam an UnstructuredConverter (which must also be a json.Marshaler), so that CEL
// reads it through ToUnstructured.
func (w *wrappedParam) MarshalJSON() ([]byte, error) {
	return json.Marshal(w.ToUnstructured())
}

func (w *wrappedParam) ToUnstructured() interface{} {
	res, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w.nested)
	if err != nil {
		return nil
	}
	meta, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&w.TypeMeta)
	if err != nil {
		return nil
	}
	for k, v := range meta {
		res[k] = v
	}
	return res
}

func (w *wrappedParam) DeepCopyObject() runtime.Object {
	return &wrappedParam{TypeMeta: w.TypeMeta, nested: w.nested.DeepCopyObject()}
}

func (w *wrappedParam) GetObjectKind() schema.ObjectKind { return w }
