package scan

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Client reads audited resources: LIST pages and WATCH streams. NewClient returns the one the operator uses.
type Client interface {
	// List reads one page of gvr, in namespace or everywhere when namespace is empty.
	List(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*unstructured.UnstructuredList, error)
	// Watch follows gvr everywhere.
	Watch(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (watch.Interface, error)
}

// NewClient returns a Client for cfg. Its LIST pages are decoded in one pass (see decodeList): reading the
// pages is most of what a first audit costs besides evaluation, and the generic decoder of client-go parses
// each page three times over. httpClient may be nil.
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

func (c *client) List(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
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
	list, err := decodeList(data)
	if err != nil {
		return nil, fmt.Errorf("decoding a page of %s: %w", gvr, err)
	}
	return list, nil
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

// listEnvelope is a LIST response with its items left undecoded. Its other fields are decoded as the generic
// decoder decodes them, whatever their type.
type listEnvelope struct {
	APIVersion interface{}       `json:"apiVersion"`
	Kind       interface{}       `json:"kind"`
	Metadata   interface{}       `json:"metadata"`
	Items      []json.RawMessage `json:"items"`
}

// decodeList decodes a JSON LIST response into exactly what unstructured.UnstructuredJSONScheme makes of it:
// every item is decoded by the same function, with the same number handling, and items without apiVersion
// and kind (the items of built-in lists) get them from the list. It reads the page once for the envelope and
// once per item, where the generic decoder also decodes every item a second time into the list's own map.
func decodeList(data []byte) (*unstructured.UnstructuredList, error) {
	var env listEnvelope
	if err := utiljson.Unmarshal(data, &env); err != nil {
		return nil, err
	}
	list := &unstructured.UnstructuredList{Object: map[string]interface{}{}}
	for k, v := range map[string]interface{}{"apiVersion": env.APIVersion, "kind": env.Kind, "metadata": env.Metadata} {
		if v != nil {
			list.Object[k] = v
		}
	}
	apiVersion, itemKind := list.GetAPIVersion(), strings.TrimSuffix(list.GetKind(), "List")
	list.Items = make([]unstructured.Unstructured, len(env.Items))
	for i, raw := range env.Items {
		item := &list.Items[i]
		m := map[string]interface{}{}
		if err := utiljson.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		item.Object = m
		if item.GetKind() == "" && item.GetAPIVersion() == "" {
			item.SetKind(itemKind)
			item.SetAPIVersion(apiVersion)
		}
	}
	return list, nil
}
