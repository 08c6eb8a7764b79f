package cli

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/internal/whatif"
)

// whatifCluster is the connection of one whatif run: the cluster, the views every policy reads it through,
// and the client that lists stored objects page by page.
type whatifCluster struct {
	*cluster
	lister scan.Client
	views  engine.Views
}

// connectWhatif connects to the cluster; any failure to reach it is ExitCluster.
func connectWhatif(ctx context.Context, flags *genericclioptions.ConfigFlags) (*whatifCluster, error) {
	c, err := connect(ctx, flags)
	if err != nil {
		return nil, err
	}
	lister, err := scan.NewClient(c.config, nil)
	if err != nil {
		return nil, ClusterError("connecting to the cluster: %w", err)
	}
	return &whatifCluster{cluster: c, lister: lister, views: c.views(ctx)}, nil
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
		if err := convertInto(u, typed); err != nil {
			return whatif.Live{}, err
		}
		live.CRDs[crd.Name] = typed
	}
	vaps, err := listTyped[admissionregistrationv1.ValidatingAdmissionPolicy](ctx, c.dynamic, vapsGVR, "", metav1.ListOptions{})
	if err != nil {
		return whatif.Live{}, err
	}
	bindings, err := listTyped[admissionregistrationv1.ValidatingAdmissionPolicyBinding](ctx, c.dynamic, vapBindingsGVR, "", metav1.ListOptions{})
	if err != nil {
		return whatif.Live{}, err
	}
	// AuditPolicies exist only where celaudit is installed (listTyped yields none where they are not served).
	aps, err := listTyped[v1alpha1.AuditPolicy](ctx, c.dynamic, auditPoliciesGVR, "", metav1.ListOptions{})
	if err != nil {
		return whatif.Live{}, err
	}
	live.VAPs, live.Bindings, live.AuditPolicies = pointers(vaps), pointers(bindings), pointers(aps)
	if len(p.MAPs)+len(p.MAPBindings) > 0 {
		if err := c.liveMutations(ctx, &live); err != nil {
			return whatif.Live{}, err
		}
	}
	return live, nil
}

// liveMutations reads today's chain of MutatingAdmissionPolicies, their bindings, and every CRD (whose
// schemas their changes to custom resources are merged with). A cluster that does not serve them has none.
func (c *whatifCluster) liveMutations(ctx context.Context, live *whatif.Live) error {
	maps, err := listTyped[admissionregistrationv1.MutatingAdmissionPolicy](ctx, c.dynamic, mapsGVR, "", metav1.ListOptions{})
	if err != nil {
		return err
	}
	bindings, err := listTyped[admissionregistrationv1.MutatingAdmissionPolicyBinding](ctx, c.dynamic, mapBindingsGVR, "", metav1.ListOptions{})
	if err != nil {
		return err
	}
	crds, err := listTyped[apiextensionsv1.CustomResourceDefinition](ctx, c.dynamic, crdsGVR, "", metav1.ListOptions{})
	if err != nil {
		return err
	}
	live.MAPs, live.MAPBindings, live.Views.CRDs = pointers(maps), pointers(bindings), pointers(crds)
	return nil
}
