package views

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/celaudit/celaudit/internal/vap"
)

// DefaultPageSize is the limit of each LIST of param objects LiveParams makes when none is given.
const DefaultPageSize = 500

// LiveResources reads discovery once, as Discovery.Refresh does: groups whose discovery fails (an
// aggregated API that is down) are left out, and their resources reported as not served.
func LiveResources(ctx context.Context, client discovery.DiscoveryInterface) (*vap.StaticResolver, error) {
	d := NewDiscovery(client)
	if err := d.Refresh(ctx); err != nil {
		return nil, err
	}
	return d.Snapshot(), nil
}

// memo runs each read once per key, however many callers ask for it and however concurrently: later and
// concurrent callers get the first read's result, errors included.
type memo[K comparable, V any] struct {
	mu    sync.Mutex
	reads map[K]func() (V, error)
}

func (m *memo[K, V]) get(key K, read func() (V, error)) (V, error) {
	m.mu.Lock()
	once, ok := m.reads[key]
	if !ok {
		if m.reads == nil {
			m.reads = map[K]func() (V, error){}
		}
		once = sync.OnceValues(read)
		m.reads[key] = once
	}
	m.mu.Unlock()
	return once() // the read itself runs outside the lock
}

// LiveNamespaces reads namespaces from the API server with a GET, each at most once: a run sees one version
// of each namespace, and a missing namespace stays missing.
type LiveNamespaces struct {
	ctx    context.Context
	client dynamic.Interface
	reads  memo[string, *corev1.Namespace]
}

var _ vap.NamespaceGetter = &LiveNamespaces{}

// NewLiveNamespaces returns namespaces read through client; ctx bounds every read, so it is the context of
// the whole run.
func NewLiveNamespaces(ctx context.Context, client dynamic.Interface) *LiveNamespaces {
	return &LiveNamespaces{ctx: ctx, client: client}
}

// Get implements vap.NamespaceGetter. A missing namespace is the API server's NotFound error, returned as it
// is.
func (l *LiveNamespaces) Get(name string) (*corev1.Namespace, error) {
	return l.reads.get(name, func() (*corev1.Namespace, error) {
		u, err := l.client.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Get(l.ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		ns := &corev1.Namespace{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ns); err != nil {
			return nil, fmt.Errorf("decoding namespace %s: %w", name, err)
		}
		ns.ManagedFields = nil // as in the operator's cache
		return ns, nil
	})
}

// paramGet and paramList are the reads of LiveParams.
type paramGet struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}

type paramList struct {
	gvk                 schema.GroupVersionKind
	namespace, selector string
}

// LiveParams reads param objects from the API server on demand, with the semantics of Params: a GET for
// an object by name, a paginated LIST (limit and continue) for objects by label selector. Each distinct
// read is made at most once. A kind the resolver does not know has no objects.
type LiveParams struct {
	ctx      context.Context
	dynamic  dynamic.Interface
	resolver vap.ResourceResolver
	pageSize int64
	gets     memo[paramGet, runtime.Object]
	lists    memo[paramList, []runtime.Object]
}

var _ vap.ParamSource = &LiveParams{}

// NewLiveParams returns param objects read through client; resolver maps param kinds to resources; each
// LIST page holds at most pageSize objects (DefaultPageSize when pageSize is not positive). ctx bounds every
// read, so it is the context of the whole run.
func NewLiveParams(ctx context.Context, client dynamic.Interface, resolver vap.ResourceResolver, pageSize int64) *LiveParams {
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	return &LiveParams{ctx: ctx, dynamic: client, resolver: resolver, pageSize: pageSize}
}

// served returns the resource serving gvk; false when the kind is not served, and has no objects.
func (l *LiveParams) served(gvk schema.GroupVersionKind) (vap.APIResource, bool) {
	res, err := l.resolver.ResourceForKind(gvk)
	return res, err == nil
}

func (l *LiveParams) client(res vap.APIResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return l.dynamic.Resource(res.Resource)
	}
	return l.dynamic.Resource(res.Resource).Namespace(namespace)
}

// Get implements vap.ParamSource. A missing object is an apierrors NotFound error. namespace is empty for a
// cluster-scoped kind; an object of a namespaced kind is only found in its namespace.
func (l *LiveParams) Get(gvk schema.GroupVersionKind, namespace, name string) (runtime.Object, error) {
	return l.gets.get(paramGet{gvk: gvk, namespace: namespace, name: name}, func() (runtime.Object, error) {
		res, ok := l.served(gvk)
		if !ok || res.Namespaced != (namespace != "") {
			return nil, paramNotFound(gvk, name)
		}
		u, err := l.client(res, namespace).Get(l.ctx, name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil, err
			}
			return nil, fmt.Errorf("reading %s %s: %w", gvk.Kind, objectKey(namespace, name), err)
		}
		u.SetManagedFields(nil) // as in the informers of Params
		return u, nil
	})
}

// List implements vap.ParamSource. namespace "" lists every namespace; a nil selector selects everything.
func (l *LiveParams) List(gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]runtime.Object, error) {
	if selector == nil {
		selector = labels.Everything()
	}
	if _, selectable := selector.Requirements(); !selectable {
		return nil, nil // labels.Nothing(), which has no string form
	}
	objs, err := l.lists.get(paramList{gvk: gvk, namespace: namespace, selector: selector.String()}, func() ([]runtime.Object, error) {
		res, ok := l.served(gvk)
		if !ok || (!res.Namespaced && namespace != "") {
			return nil, nil
		}
		client := l.client(res, namespace)
		var out []runtime.Object
		opts := metav1.ListOptions{LabelSelector: selector.String(), Limit: l.pageSize}
		for {
			page, err := client.List(l.ctx, opts)
			if err != nil {
				if namespace == "" {
					return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
				}
				return nil, fmt.Errorf("listing %s in namespace %s: %w", gvk.Kind, namespace, err)
			}
			for i := range page.Items {
				u := &page.Items[i]
				u.SetManagedFields(nil)
				out = append(out, u)
			}
			if opts.Continue = page.GetContinue(); opts.Continue == "" {
				break
			}
		}
		sortObjects(out)
		return out, nil
	})
	return slices.Clone(objs), err
}
