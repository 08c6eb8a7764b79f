package cli

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
)

// cluster is a connection to the cluster kubectl's flags name, with its discovery read once.
type cluster struct {
	config   *rest.Config
	dynamic  dynamic.Interface
	resolver *vap.StaticResolver
}

// restConfig reads the kubeconfig the connection flags name; a failure is ExitCluster, like any failure to
// reach the cluster.
func restConfig(flags *genericclioptions.ConfigFlags) (*rest.Config, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, ClusterError("reading the kubeconfig: %w", err)
	}
	return cfg, nil
}

// dynamicClient returns a dynamic client for the cluster the connection flags name.
func dynamicClient(flags *genericclioptions.ConfigFlags) (dynamic.Interface, error) {
	cfg, err := restConfig(flags)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, ClusterError("connecting to the cluster: %w", err)
	}
	return dyn, nil
}

// connect reads the kubeconfig and the cluster's discovery; any failure is ExitCluster.
func connect(ctx context.Context, flags *genericclioptions.ConfigFlags) (*cluster, error) {
	cfg, err := restConfig(flags)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, ClusterError("connecting to the cluster: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, ClusterError("connecting to the cluster: %w", err)
	}
	resolver, err := views.LiveResources(ctx, dc)
	if err != nil {
		return nil, ClusterError("reading the cluster's served resources: %w", err)
	}
	return &cluster{config: cfg, dynamic: dyn, resolver: resolver}, nil
}

// views returns the views policies read the cluster through: namespaces and params read on demand, each
// at most once.
func (c *cluster) views(ctx context.Context) engine.Views {
	return engine.Views{
		Resources:  c.resolver,
		Namespaces: views.NewLiveNamespaces(ctx, c.dynamic),
		Params:     views.NewLiveParams(ctx, c.dynamic, c.resolver, views.DefaultPageSize),
	}
}

// listTyped reads every object of gvr in namespace ("" for all) with paginated LISTs (see listAll), decoded
// into T.
func listTyped[T any, PT interface {
	*T
	runtime.Object
}](ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) ([]T, error) {
	var out []T
	err := listAll(ctx, dyn, gvr, namespace, opts, func(u *unstructured.Unstructured) error {
		var obj T
		if err := convertInto(u, PT(&obj)); err != nil {
			return err
		}
		out = append(out, obj)
		return nil
	})
	return out, err
}

// pointers returns a pointer to each element of vs.
func pointers[T any](vs []T) []*T {
	out := make([]*T, len(vs))
	for i := range vs {
		out[i] = &vs[i]
	}
	return out
}
