package vap

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// storageKey returns the identity under which the apiserver considers resources equivalent. kube-apiserver v1.37
// keys its equivalent-resource registry by storage prefix, and stores these resources of different API groups
// together (k8s.io/kubernetes pkg/kubeapiserver/default_storage_factory_builder.go, AddCohabitatingResources).
// Discovery does not expose storage prefixes, hence this copy. "" selects the registry's default key, the
// GroupResource itself.
func storageKey(gr schema.GroupResource) string {
	switch gr {
	case schema.GroupResource{Group: "networking.k8s.io", Resource: "networkpolicies"},
		schema.GroupResource{Group: "extensions", Resource: "networkpolicies"}:
		return "networkpolicies.networking.k8s.io"
	case schema.GroupResource{Group: "apps", Resource: "deployments"},
		schema.GroupResource{Group: "extensions", Resource: "deployments"}:
		return "deployments.apps"
	case schema.GroupResource{Group: "apps", Resource: "daemonsets"},
		schema.GroupResource{Group: "extensions", Resource: "daemonsets"}:
		return "daemonsets.apps"
	case schema.GroupResource{Group: "apps", Resource: "replicasets"},
		schema.GroupResource{Group: "extensions", Resource: "replicasets"}:
		return "replicasets.apps"
	case schema.GroupResource{Group: "", Resource: "events"},
		schema.GroupResource{Group: "events.k8s.io", Resource: "events"}:
		return "events"
	case schema.GroupResource{Group: "", Resource: "replicationcontrollers"},
		schema.GroupResource{Group: "extensions", Resource: "replicationcontrollers"}:
		return "replicationcontrollers"
	case schema.GroupResource{Group: "policy", Resource: "podsecuritypolicies"},
		schema.GroupResource{Group: "extensions", Resource: "podsecuritypolicies"}:
		return "podsecuritypolicies.policy"
	case schema.GroupResource{Group: "networking.k8s.io", Resource: "ingresses"},
		schema.GroupResource{Group: "extensions", Resource: "ingresses"}:
		return "ingresses.networking.k8s.io"
	}
	return ""
}

// StaticResolver is a ResourceResolver over a fixed snapshot of discovery. Rebuild it (and re-bind policies)
// when discovery changes.
type StaticResolver struct {
	resources []APIResource
	byKind    map[schema.GroupVersionKind]APIResource
	registry  runtime.EquivalentResourceRegistry
}

var _ ResourceResolver = &StaticResolver{}

// NewStaticResolver builds a resolver from discovery output, e.g. the lists returned by client-go's
// discovery ServerGroupsAndResources. The order of lists and of resources in them is the order of preference:
// pass each group's preferred version first, as discovery does.
func NewStaticResolver(lists []*metav1.APIResourceList) (*StaticResolver, error) {
	r := &StaticResolver{
		byKind:   map[schema.GroupVersionKind]APIResource{},
		registry: runtime.NewEquivalentResourceRegistryWithIdentity(storageKey),
	}
	seen := map[schema.GroupVersionResource]bool{}
	for _, list := range lists {
		if list == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			return nil, fmt.Errorf("parsing discovery group version %q: %w", list.GroupVersion, err)
		}
		for _, res := range list.APIResources {
			name, sub, _ := strings.Cut(res.Name, "/")
			gvr := gv.WithResource(name)
			kind := schema.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: res.Kind}
			if res.Group != "" || res.Version != "" { // subresources such as scale name their own kind
				kind.Group, kind.Version = res.Group, res.Version
			}
			r.registry.RegisterKindFor(gvr, sub, kind)
			if sub != "" || seen[gvr] {
				continue
			}
			seen[gvr] = true
			ar := APIResource{
				Resource:   gvr,
				Kind:       res.Kind,
				Namespaced: res.Namespaced,
				Auditable:  slices.Contains(res.Verbs, "list") && slices.Contains(res.Verbs, "watch"),
			}
			r.resources = append(r.resources, ar)
			if _, dup := r.byKind[ar.GroupVersionKind()]; !dup {
				r.byKind[ar.GroupVersionKind()] = ar
			}
		}
	}
	return r, nil
}

// ServedResources implements ResourceResolver.
func (r *StaticResolver) ServedResources() []APIResource { return slices.Clone(r.resources) }

// Namespaced tells whether the served resource gvr is namespaced; known is false when gvr is not served.
func (r *StaticResolver) Namespaced(gvr schema.GroupVersionResource) (namespaced, known bool) {
	for i := range r.resources {
		if r.resources[i].Resource == gvr {
			return r.resources[i].Namespaced, true
		}
	}
	return false, false
}

// ResourceForKind implements ResourceResolver.
func (r *StaticResolver) ResourceForKind(gvk schema.GroupVersionKind) (APIResource, error) {
	res, ok := r.byKind[gvk]
	if !ok {
		return APIResource{}, fmt.Errorf("no resource serves %v", gvk)
	}
	return res, nil
}

// EquivalentResourcesFor implements runtime.EquivalentResourceMapper.
func (r *StaticResolver) EquivalentResourcesFor(resource schema.GroupVersionResource, subresource string) []schema.GroupVersionResource {
	return r.registry.EquivalentResourcesFor(resource, subresource)
}

// KindFor implements runtime.EquivalentResourceMapper.
func (r *StaticResolver) KindFor(resource schema.GroupVersionResource, subresource string) schema.GroupVersionKind {
	return r.registry.KindFor(resource, subresource)
}

// NewResolverFromDiscovery builds a resolver from discovery's groups and resource lists (client-go
// discovery.ServerGroupsAndResources), ordering each group's preferred version first, which is the order of
// preference NewStaticResolver expects.
func NewResolverFromDiscovery(groups []*metav1.APIGroup, lists []*metav1.APIResourceList) (*StaticResolver, error) {
	byGV := map[string]*metav1.APIResourceList{}
	for _, l := range lists {
		byGV[l.GroupVersion] = l
	}
	ordered := make([]*metav1.APIResourceList, 0, len(lists))
	used := map[string]bool{}
	add := func(gv string) {
		if l := byGV[gv]; l != nil && !used[gv] {
			used[gv] = true
			ordered = append(ordered, l)
		}
	}
	for _, g := range groups {
		add(g.PreferredVersion.GroupVersion)
		for _, v := range g.Versions {
			add(v.GroupVersion)
		}
	}
	for _, l := range lists {
		add(l.GroupVersion)
	}
	return NewStaticResolver(ordered)
}
