package views

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/celaudit/celaudit/internal/vap"
)

// namespaceFallbackTimeout bounds a read of a namespace before the informer has synced.
const namespaceFallbackTimeout = 30 * time.Second

// InformerNamespaces serves namespaces, for namespaceSelectors and the namespaceObject variable, from a
// namespace informer. Every evaluation of every binding on a namespaced object reads one, so once the informer
// has synced it reads the informer's store directly: a cache client's type lookup, deep copy and timeout
// context cost more than the evaluation's CEL. Evaluations only read the namespace (vap.NamespaceGetter).
type InformerNamespaces struct {
	store     toolscache.Store // nil when the informer does not expose it
	hasSynced func() bool
	fallback  func(ctx context.Context, name string) (*corev1.Namespace, error)
}

var _ vap.NamespaceGetter = InformerNamespaces{}

// NewInformerNamespaces returns namespaces read from store, an informer's store keyed by name, once
// hasSynced reports the informer synced. Before then, or when store is nil, each read goes to fallback
// (typically a cache client that waits for the informer), whose errors are returned as they are: a
// NotFound must stay an apierrors NotFound.
func NewInformerNamespaces(store toolscache.Store, hasSynced func() bool, fallback func(ctx context.Context, name string) (*corev1.Namespace, error)) InformerNamespaces {
	return InformerNamespaces{store: store, hasSynced: hasSynced, fallback: fallback}
}

// Get implements vap.NamespaceGetter.
func (c InformerNamespaces) Get(name string) (*corev1.Namespace, error) {
	if c.store != nil && c.hasSynced() {
		obj, exists, err := c.store.GetByKey(name)
		if err != nil {
			return nil, fmt.Errorf("reading namespace %s from the cache: %w", name, err)
		}
		if !exists {
			return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
		}
		if ns, ok := obj.(*corev1.Namespace); ok {
			return ns, nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), namespaceFallbackTimeout)
	defer cancel()
	return c.fallback(ctx, name)
}
