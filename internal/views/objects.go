package views

import (
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// objectKey orders param objects: lists are in namespace/name order, whichever view serves them.
func objectKey(namespace, name string) string { return namespace + "/" + name }

// sortObjects puts unstructured objects in namespace/name order, so that params are evaluated in a stable
// order.
func sortObjects(objs []runtime.Object) {
	sort.Slice(objs, func(i, j int) bool {
		a, b := objs[i].(*unstructured.Unstructured), objs[j].(*unstructured.Unstructured)
		return objectKey(a.GetNamespace(), a.GetName()) < objectKey(b.GetNamespace(), b.GetName())
	})
}

// paramNotFound is the error for a missing param object of kind gvk.
func paramNotFound(gvk schema.GroupVersionKind, name string) error {
	return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, name)
}
