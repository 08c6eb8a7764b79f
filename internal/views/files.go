package views

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/celaudit/celaudit/internal/vap"
)

// isCRDKind reports whether gk is the kind of CustomResourceDefinitions, in any version.
func isCRDKind(gk schema.GroupKind) bool {
	return gk.Group == apiextensionsv1.GroupName && gk.Kind == "CustomResourceDefinition"
}

// crdVerbs are the verbs the apiserver serves for a custom resource (apiextensions-apiserver
// customresource_discovery_controller.go), in its order.
func crdVerbs() metav1.Verbs {
	return metav1.Verbs{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}
}

// subresourceVerbs are the verbs of the status and scale subresources of a custom resource.
func subresourceVerbs() metav1.Verbs { return metav1.Verbs{"get", "patch", "update"} }

// FileDiscovery returns the discovery a kube-apiserver would serve once the CustomResourceDefinitions among
// objs are established: its built-in resources (BuiltinDiscovery) followed by the groups of the CRDs, in
// name order as the apiserver orders groups of equal priority. Each served version of a CRD is a resource
// with the CRD's names and scope, the verbs the apiserver serves for custom resources, and its status and
// scale subresources. Objects other than CRDs are ignored; a CRD that does not decode, or of a version the
// apiserver no longer serves (apiextensions.k8s.io/v1beta1), is an error. Of two CRDs with one name, the
// later one counts, as when they are applied in order.
func FileDiscovery(objs []*unstructured.Unstructured) (DiscoverySnapshot, error) {
	snap, err := BuiltinDiscovery()
	if err != nil {
		return DiscoverySnapshot{}, err
	}
	crds := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if !isCRDKind(gvk.GroupKind()) {
			continue
		}
		if gvk.Version != apiextensionsv1.SchemeGroupVersion.Version {
			return DiscoverySnapshot{}, fmt.Errorf("CustomResourceDefinition %s: %s is not served by kube-apiserver %s", o.GetName(), o.GetAPIVersion(), snap.ServerVersion)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, crd); err != nil {
			return DiscoverySnapshot{}, fmt.Errorf("decoding CustomResourceDefinition %s: %w", o.GetName(), err)
		}
		crds[crd.Name] = crd
	}
	groups, lists := crdDiscovery(crds)
	snap.Groups = append(snap.Groups, groups...)
	snap.Resources = append(snap.Resources, lists...)
	return snap, nil
}

// crdDiscovery returns the discovery groups and resource lists of crds, as apiextensions-apiserver builds
// them and client-go's ServerGroupsAndResources returns them from aggregated discovery.
func crdDiscovery(crds map[string]*apiextensionsv1.CustomResourceDefinition) ([]*metav1.APIGroup, []*metav1.APIResourceList) {
	byGroup := map[string][]*apiextensionsv1.CustomResourceDefinition{}
	for _, crd := range crds {
		byGroup[crd.Spec.Group] = append(byGroup[crd.Spec.Group], crd)
	}
	names := make([]string, 0, len(byGroup))
	for g := range byGroup {
		names = append(names, g)
	}
	sort.Strings(names)
	var groups []*metav1.APIGroup
	var lists []*metav1.APIResourceList
	for _, g := range names {
		inGroup := byGroup[g]
		// Within a version, resources are ordered by plural, each followed by its subresources.
		sort.Slice(inGroup, func(i, j int) bool { return inGroup[i].Spec.Names.Plural < inGroup[j].Spec.Names.Plural })
		resources := map[string][]metav1.APIResource{}
		for _, crd := range inGroup {
			for _, v := range crd.Spec.Versions {
				if v.Served {
					resources[v.Name] = append(resources[v.Name], crdResources(crd, v)...)
				}
			}
		}
		if len(resources) == 0 {
			continue // no served version: the group is not served
		}
		versions := make([]metav1.GroupVersionForDiscovery, 0, len(resources))
		for v := range resources {
			versions = append(versions, metav1.GroupVersionForDiscovery{GroupVersion: g + "/" + v, Version: v})
		}
		sort.Slice(versions, func(i, j int) bool {
			return version.CompareKubeAwareVersionStrings(versions[i].Version, versions[j].Version) > 0
		})
		groups = append(groups, &metav1.APIGroup{Name: g, Versions: versions, PreferredVersion: versions[0]})
		for _, v := range versions {
			lists = append(lists, &metav1.APIResourceList{GroupVersion: v.GroupVersion, APIResources: resources[v.Version]})
		}
	}
	return groups, lists
}

// crdResources returns the resource and subresources a served version of crd adds to discovery.
func crdResources(crd *apiextensionsv1.CustomResourceDefinition, v apiextensionsv1.CustomResourceDefinitionVersion) []metav1.APIResource {
	names := crd.Spec.Names
	singular := names.Singular
	if singular == "" { // defaulted by the apiserver
		singular = strings.ToLower(names.Kind)
	}
	namespaced := crd.Spec.Scope == apiextensionsv1.NamespaceScoped
	out := []metav1.APIResource{{
		Name:         names.Plural,
		SingularName: singular,
		Namespaced:   namespaced,
		Group:        crd.Spec.Group,
		Version:      v.Name,
		Kind:         names.Kind,
		Verbs:        crdVerbs(),
		ShortNames:   names.ShortNames,
		Categories:   names.Categories,
	}}
	if v.Subresources == nil {
		return out
	}
	if v.Subresources.Status != nil {
		out = append(out, metav1.APIResource{
			Name: names.Plural + "/status", SingularName: singular, Namespaced: namespaced,
			Group: crd.Spec.Group, Version: v.Name, Kind: names.Kind, Verbs: subresourceVerbs(),
		})
	}
	if v.Subresources.Scale != nil {
		out = append(out, metav1.APIResource{
			Name: names.Plural + "/scale", SingularName: singular, Namespaced: namespaced,
			Group: "autoscaling", Version: "v1", Kind: "Scale", Verbs: subresourceVerbs(),
		})
	}
	return out
}

// FileResources returns the resources a kube-apiserver would serve once the CRDs among objs are established
// (FileDiscovery).
func FileResources(objs []*unstructured.Unstructured) (*vap.StaticResolver, error) {
	snap, err := FileDiscovery(objs)
	if err != nil {
		return nil, err
	}
	return vap.NewResolverFromDiscovery(snap.Groups, snap.Resources)
}

// FileNamespaces serves the Namespace objects among a set of objects.
type FileNamespaces struct {
	byName map[string]*corev1.Namespace
}

var _ vap.NamespaceGetter = &FileNamespaces{}

// NewFileNamespaces returns the Namespaces (v1) among objs, labelled kubernetes.io/metadata.name as the
// apiserver labels every namespace it stores. Of two Namespaces with one name, the later one counts. A
// Namespace that does not decode is an error.
func NewFileNamespaces(objs []*unstructured.Unstructured) (*FileNamespaces, error) {
	out := &FileNamespaces{byName: map[string]*corev1.Namespace{}}
	for _, o := range objs {
		if o.GroupVersionKind() != corev1.SchemeGroupVersion.WithKind("Namespace") {
			continue
		}
		ns := &corev1.Namespace{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ns); err != nil {
			return nil, fmt.Errorf("decoding Namespace %s: %w", o.GetName(), err)
		}
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
		out.byName[ns.Name] = ns
	}
	return out, nil
}

// Get implements vap.NamespaceGetter.
func (f *FileNamespaces) Get(name string) (*corev1.Namespace, error) {
	if ns, ok := f.byName[name]; ok {
		return ns, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
}

// FileParams serves a set of objects as param objects, with the semantics of Params: by exact kind and
// version, by namespace and name, and lists in namespace/name order.
type FileParams struct {
	byGVK map[schema.GroupVersionKind][]*unstructured.Unstructured // in namespace/name order
}

var _ vap.ParamSource = &FileParams{}

// NewFileParams returns objs as param objects. Of two objects with one kind, namespace and name, the later
// one counts. The objects are shared, not copied: evaluations only read them.
func NewFileParams(objs []*unstructured.Unstructured) *FileParams {
	latest := map[schema.GroupVersionKind]map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if latest[gvk] == nil {
			latest[gvk] = map[string]*unstructured.Unstructured{}
		}
		latest[gvk][objectKey(o.GetNamespace(), o.GetName())] = o
	}
	out := &FileParams{byGVK: map[schema.GroupVersionKind][]*unstructured.Unstructured{}}
	for gvk, byKey := range latest {
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out.byGVK[gvk] = append(out.byGVK[gvk], byKey[k])
		}
	}
	return out
}

// Get implements vap.ParamSource.
func (f *FileParams) Get(gvk schema.GroupVersionKind, namespace, name string) (runtime.Object, error) {
	for _, o := range f.byGVK[gvk] {
		if o.GetNamespace() == namespace && o.GetName() == name {
			return o, nil
		}
	}
	return nil, paramNotFound(gvk, name)
}

// List implements vap.ParamSource.
func (f *FileParams) List(gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]runtime.Object, error) {
	if selector == nil {
		selector = labels.Everything()
	}
	var out []runtime.Object
	for _, o := range f.byGVK[gvk] {
		if (namespace == "" || o.GetNamespace() == namespace) && selector.Matches(labels.Set(o.GetLabels())) {
			out = append(out, o)
		}
	}
	return out, nil
}
