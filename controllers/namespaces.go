package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/views"
)

// newCachedNamespaces returns namespaces read from c, whose namespace informer it starts: from the
// informer's store once it has synced, and before that through the cache client, which waits for it.
func newCachedNamespaces(c cache.Cache) (views.InformerNamespaces, error) {
	inf, err := c.GetInformer(context.Background(), &corev1.Namespace{})
	if err != nil {
		return views.InformerNamespaces{}, fmt.Errorf("getting the namespace informer: %w", err)
	}
	var store toolscache.Store // nil when the informer does not expose it
	if s, ok := inf.(interface{ GetStore() toolscache.Store }); ok {
		store = s.GetStore()
	}
	return views.NewInformerNamespaces(store, inf.HasSynced, func(ctx context.Context, name string) (*corev1.Namespace, error) {
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
			return nil, err
		}
		return ns, nil
	}), nil
}
