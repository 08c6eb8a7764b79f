package scan

import (
	"context"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/celaudit/celaudit/internal/listjson"
)

// Client reads audited resources: LIST pages and WATCH streams. NewClient returns the one the operator uses.
type Client interface {
	// List reads one page of gvr, in namespace or everywhere when namespace is empty. Its items are decoded
	// when they are used.
	List(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*listjson.Page, error)
	// Watch follows gvr everywhere.
	Watch(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (watch.Interface, error)
}

// NewClient returns a Client for cfg. Its LIST pages are checked in one pass and their items decoded one at a
// time (see listjson.DecodePage): reading the pages is most of what a first audit costs besides evaluation,
// the generic decoder of client-go parses each page four times over, and a page's decoded objects take
// several times the memory of its JSON. httpClient may be nil.
func NewClient(cfg *rest.Config, httpClient *http.Client) (Client, error) {
	cfg = dynamic.ConfigFor(cfg)
	if httpClient == nil {
		var err error
		if httpClient, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, fmt.Errorf("creating HTTP client: %w", err)
		}
	}
	rc, err := rest.UnversionedRESTClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating REST client: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	return &client{rest: rc, dynamic: dyn}, nil
}

type client struct {
	rest    rest.Interface
	dynamic dynamic.Interface
}

func (c *client) List(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*listjson.Page, error) {
	res := c.rest.Get().AbsPath(resourcePath(gvr, namespace)...).
		SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).
		Do(ctx)
	// Error, unlike Raw, decodes the Status the API server sent (forbidden, expired, ...): callers test it
	// with apierrors and report its message.
	if err := res.Error(); err != nil {
		return nil, err
	}
	data, err := res.Raw()
	if err != nil {
		return nil, err
	}
	page, err := listjson.DecodePage(data)
	if err != nil {
		return nil, fmt.Errorf("decoding a page of %s: %w", gvr, err)
	}
	return page, nil
}

func (c *client) Watch(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (watch.Interface, error) {
	return c.dynamic.Resource(gvr).Watch(ctx, opts)
}

func resourcePath(gvr schema.GroupVersionResource, namespace string) []string {
	segs := []string{"/apis", gvr.Group, gvr.Version}
	if gvr.Group == "" {
		segs = []string{"/api", gvr.Version}
	}
	if namespace != "" {
		segs = append(segs, "namespaces", namespace)
	}
	return append(segs, gvr.Resource)
}
