package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/vap"
)

// cachedNamespaces serves namespaces, for namespaceSelectors and the namespaceObject variable, from the
// manager's cache.
type cachedNamespaces struct {
	reader client.Reader
}

var _ vap.NamespaceGetter = cachedNamespaces{}

func (c cachedNamespaces) Get(name string) (*corev1.Namespace, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := &corev1.Namespace{}
	if err := c.reader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return nil, err
	}
	return ns, nil
}
