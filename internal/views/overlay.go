package views

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/vap"
)

// OverlayParams are the param objects of a cluster with some objects replaced or added, as they would be
// once proposed objects are applied: an object of the overlay hides the base's object of the same kind,
// namespace and name, and the overlay's objects are seen beside the base's others. A what-if run reads the
// live cluster through it with the proposed params as the overlay.
type OverlayParams struct {
	base    vap.ParamSource
	overlay *FileParams
	hidden  map[schema.GroupVersionKind]map[string]bool // namespace/name of the overlay's objects
}

var _ vap.ParamSource = &OverlayParams{}

// NewOverlayParams returns base with objs applied over it (see OverlayParams).
func NewOverlayParams(base vap.ParamSource, objs []*unstructured.Unstructured) *OverlayParams {
	hidden := map[schema.GroupVersionKind]map[string]bool{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if hidden[gvk] == nil {
			hidden[gvk] = map[string]bool{}
		}
		hidden[gvk][objectKey(o.GetNamespace(), o.GetName())] = true
	}
	return &OverlayParams{base: base, overlay: NewFileParams(objs), hidden: hidden}
}

// Get implements vap.ParamSource.
func (o *OverlayParams) Get(gvk schema.GroupVersionKind, namespace, name string) (runtime.Object, error) {
	if o.hidden[gvk][objectKey(namespace, name)] {
		return o.overlay.Get(gvk, namespace, name)
	}
	return o.base.Get(gvk, namespace, name)
}

// List implements vap.ParamSource: the base's objects not hidden by the overlay, and the overlay's, in
// namespace/name order as every view lists them.
func (o *OverlayParams) List(gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]runtime.Object, error) {
	base, err := o.base.List(gvk, namespace, selector)
	if err != nil {
		return nil, err
	}
	hidden := o.hidden[gvk]
	if len(hidden) == 0 {
		return base, nil
	}
	out := make([]runtime.Object, 0, len(base))
	for _, obj := range base {
		if u, ok := obj.(*unstructured.Unstructured); ok && hidden[objectKey(u.GetNamespace(), u.GetName())] {
			continue
		}
		out = append(out, obj)
	}
	more, err := o.overlay.List(gvk, namespace, selector)
	if err != nil {
		return nil, err
	}
	out = append(out, more...)
	sortObjects(out)
	return out, nil
}

// OverlayNamespaces are the namespaces of a cluster with some replaced or added by proposed Namespace
// objects.
type OverlayNamespaces struct {
	base    vap.NamespaceGetter
	overlay *FileNamespaces
}

var _ vap.NamespaceGetter = &OverlayNamespaces{}

// NewOverlayNamespaces returns base with the Namespaces among objs applied over it; other objects are
// ignored. A Namespace that does not decode is an error.
func NewOverlayNamespaces(base vap.NamespaceGetter, objs []*unstructured.Unstructured) (*OverlayNamespaces, error) {
	overlay, err := NewFileNamespaces(objs)
	if err != nil {
		return nil, err
	}
	return &OverlayNamespaces{base: base, overlay: overlay}, nil
}

// Get implements vap.NamespaceGetter.
func (o *OverlayNamespaces) Get(name string) (*corev1.Namespace, error) {
	if ns, err := o.overlay.Get(name); err == nil {
		return ns, nil
	}
	return o.base.Get(name)
}
