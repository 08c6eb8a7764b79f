package views_test

import (
	"encoding/json"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// objOption changes an object under construction.
type objOption func(*unstructured.Unstructured)

// withLabels sets labels, given as key, value pairs.
func withLabels(kv ...string) objOption {
	return func(u *unstructured.Unstructured) {
		l := u.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		u.SetLabels(l)
	}
}

// withField sets a string field at a dotted path, such as data.limit or spec.tier.
func withField(path, value string) objOption {
	return func(u *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(u.Object, value, strings.Split(path, ".")...); err != nil {
			panic(err)
		}
	}
}

func newObject(gvk schema.GroupVersionKind, namespace, name string, opts ...objOption) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(namespace)
	u.SetName(name)
	for _, o := range opts {
		o(u)
	}
	return u
}

var (
	configMapKind = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	namespaceKind = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
)

func newConfigMap(namespace, name string, opts ...objOption) *unstructured.Unstructured {
	return newObject(configMapKind, namespace, name, opts...)
}

func newNamespace(name string, opts ...objOption) *unstructured.Unstructured {
	return newObject(namespaceKind, "", name, opts...)
}

// crdOption changes a CRD under construction.
type crdOption func(*apiextensionsv1.CustomResourceDefinition)

// withVersion adds a version whose objects may hold anything.
func withVersion(name string, served, storage bool, opts ...func(*apiextensionsv1.CustomResourceDefinitionVersion)) crdOption {
	return func(crd *apiextensionsv1.CustomResourceDefinition) {
		preserve := true
		v := apiextensionsv1.CustomResourceDefinitionVersion{
			Name: name, Served: served, Storage: storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", XPreserveUnknownFields: &preserve,
			}},
		}
		for _, o := range opts {
			o(&v)
		}
		crd.Spec.Versions = append(crd.Spec.Versions, v)
	}
}

// statusAndScale gives a version the status and scale subresources.
func statusAndScale(v *apiextensionsv1.CustomResourceDefinitionVersion) {
	v.Subresources = &apiextensionsv1.CustomResourceSubresources{
		Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
		Scale:  &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas"},
	}
}

// statusOnly gives a version the status subresource.
func statusOnly(v *apiextensionsv1.CustomResourceDefinitionVersion) {
	v.Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
}

func withShortNames(names ...string) crdOption {
	return func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Spec.Names.ShortNames = names }
}

func withCategories(names ...string) crdOption {
	return func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Spec.Names.Categories = names }
}

// newCRD returns a CRD as a manifest would hold it: no status, and no singular name (the apiserver defaults it).
func newCRD(group, plural, kind string, scope apiextensionsv1.ResourceScope, opts ...crdOption) *unstructured.Unstructured {
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind},
			Scope: scope,
		},
	}
	for _, o := range opts {
		o(crd)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		panic(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u
}

// toJSON renders v for a failure message.
func toJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// objectList returns o as a list of one object, or an empty list when o is nil.
func objectList(o runtime.Object) []runtime.Object {
	if o == nil {
		return nil
	}
	return []runtime.Object{o}
}
