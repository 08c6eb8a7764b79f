package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/vap"
)

// cachedNamespaces serves namespaces, for namespaceSelectors and the namespaceObject variable, from the
// manager's cache. Every evaluation of every binding on a namespaced object reads one, so once the informer
// has synced it reads the informer's store directly: the cache client's type lookup, deep copy and timeout
// context cost more than the evaluation's CEL. Evaluations only read the namespace (vap.NamespaceGetter).
type cachedNamespaces struct {
	reader   client.Reader
	informer cache.Informer
	store    toolscache.Store // nil when the informer does not expose it
}

var _ vap.NamespaceGetter = cachedNamespaces{}

// newCachedNamespaces returns namespaces read from c, whose namespace informer it starts.
func newCachedNamespaces(c cache.Cache) (cachedNamespaces, error) {
	inf, err := c.GetInformer(context.Background(), &corev1.Namespace{})
	if err != nil {
		return cachedNamespaces{}, fmt.Errorf("getting the namespace informer: %w", err)
	}
	out := cachedNamespaces{reader: c, informer: inf}
	if s, ok := inf.(interface{ GetStore() toolscache.Store }); ok {
		out.store = s.GetStore()
	}
	return out, nil
}

func (c cachedNamespaces) Get(name string) (*corev1.Namespace, error) {
	if c.store != nil && c.informer.HasSynced() {
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
	// Before the informer has synced, the cache client waits for it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := &corev1.Namespace{}
	if err := c.reader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return nil, err
	}
	return ns, nil
}
