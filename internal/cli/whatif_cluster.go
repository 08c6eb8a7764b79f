package cli

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
	"github.com/celaudit/celaudit/internal/whatif"
)

// whatifCluster is the connection of one whatif run: discovery read once, the views every policy reads the
// cluster through, and the client that lists stored objects page by page.
type whatifCluster struct {
	dynamic  dynamic.Interface
	resolver *vap.StaticResolver
	lister   scan.Client
	views    engine.Views
}

// connect reads discovery; any failure to reach the cluster is ExitCluster.
func connectWhatif(ctx context.Context, flags *genericclioptions.ConfigFlags) (*whatifCluster, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, ClusterError("reading the kubeconfig: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, ClusterError("connecting to the cluster: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, ClusterError("connecting to the cluster: %w", err)
	}
	lister, err := scan.NewClient(cfg, nil)
	if err != nil {
		return nil, ClusterError("connecting to the cluster: %w", err)
	}
	resolver, err := views.LiveResources(ctx, dc)
	if err != nil {
		return nil, ClusterError("reading the cluster's API resources: %w", err)
	}
	return &whatifCluster{
		dynamic:  dyn,
		resolver: resolver,
		lister:   lister,
		views: engine.Views{
			Resources:  resolver,
			Namespaces: views.NewLiveNamespaces(ctx, dyn),
			Params:     views.NewLiveParams(ctx, dyn, resolver, views.DefaultPageSize),
		},
	}, nil
}

func (c *whatifCluster) serves(gvk schema.GroupVersionKind) bool {
	_, err := c.resolver.ResourceForKind(gvk)
	return err == nil
}

func (c *whatifCluster) servesResource(gvr schema.GroupVersionResource) bool {
	_, known := c.resolver.Namespaced(gvr)
	return known
}

// live reads what the proposal is compared with: the live CRDs it names, and every policy, binding and
// AuditPolicy (few, small objects), with paginated LISTs.
func (c *whatifCluster) live(ctx context.Context, p *whatif.Proposal) (whatif.Live, error) {
	live := whatif.Live{CRDs: map[string]*apiextensionsv1.CustomResourceDefinition{}, Views: c.views}
	crds := c.dynamic.Resource(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	for _, crd := range p.CRDs {
		u, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return whatif.Live{}, ClusterError("reading CustomResourceDefinition %s: %w", crd.Name, err)
		}
		typed := &apiextensionsv1.CustomResourceDefinition{}
		if err := decodeWhatifLive(u, typed); err != nil {
			return whatif.Live{}, err
		}
		live.CRDs[crd.Name] = typed
	}
	if err := listWhatifLive(ctx, c.dynamic, admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies"), &live.VAPs); err != nil {
		return whatif.Live{}, err
	}
	if err := listWhatifLive(ctx, c.dynamic, admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicybindings"), &live.Bindings); err != nil {
		return whatif.Live{}, err
	}
	// AuditPolicies exist only where celaudit is installed.
	if res, err := c.resolver.ResourceForKind(v1alpha1.GroupVersion.WithKind("AuditPolicy")); err == nil {
		if err := listWhatifLive(ctx, c.dynamic, res.Resource, &live.AuditPolicies); err != nil {
			return whatif.Live{}, err
		}
	}
	return live, nil
}

// listWhatifLive reads every object of gvr, page by page, into out.
func listWhatifLive[T any](ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, out *[]*T) error {
	opts := metav1.ListOptions{Limit: views.DefaultPageSize}
	for {
		page, err := dyn.Resource(gvr).List(ctx, opts)
		if err != nil {
			return ClusterError("listing %s: %w", gvr.Resource, err)
		}
		for i := range page.Items {
			obj := new(T)
			if err := decodeWhatifLive(&page.Items[i], any(obj).(runtime.Object)); err != nil {
				return err
			}
			*out = append(*out, obj)
		}
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			return nil
		}
	}
}

func decodeWhatifLive(u *unstructured.Unstructured, into runtime.Object) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		return ClusterError("decoding %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}
