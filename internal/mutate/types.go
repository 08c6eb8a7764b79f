package mutate

import (
	"fmt"

	apihelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/applyconfigurations"

	"github.com/celaudit/celaudit/internal/admit"
)

// Types knows what the API server knows of each kind while it admits an object: how built-in objects are
// converted and defaulted (the kube-apiserver's scheme), how custom resources are defaulted (their CRD
// version's structural schema), and the type converter that merges ApplyConfigurations into them. It is
// immutable and safe for concurrent use; build it again when CRDs change.
type Types struct {
	scheme  *runtime.Scheme
	builtin managedfields.TypeConverter
	custom  map[schema.GroupVersionKind]*customKind
}

// customKind is one served version of a CRD.
type customKind struct {
	structural *structuralschema.Structural // nil without a schema
	converter  managedfields.TypeConverter
	// err, when not nil, fails every evaluation of the kind: the version's schema could not be built.
	err error
}

// NewTypes returns the types of the built-in kinds and of the served versions of crds.
//
// Built-in objects are converted and defaulted by the kube-apiserver's own scheme (k8s.io/kubernetes
// pkg/apis/...), and merged with the OpenAPI models client-go generates from the same Go types the API server
// publishes. Custom resources are merged with the OpenAPI v3 schema the API server publishes for their
// version (apiextensions-apiserver's builder, which the MutatingAdmissionPolicy plugin reads back through
// discovery) and defaulted from their structural schema, as the custom resource handler defaults them.
func NewTypes(crds []*apiextensionsv1.CustomResourceDefinition) *Types {
	scheme := admit.BuiltinScheme()
	t := &Types{
		scheme:  scheme,
		builtin: applyconfigurations.NewTypeConverter(scheme),
		custom:  map[schema.GroupVersionKind]*customKind{},
	}
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
			t.custom[gvk] = newCustomKind(crd, v.Name)
		}
	}
	return t
}

func newCustomKind(crd *apiextensionsv1.CustomResourceDefinition, version string) *customKind {
	k := &customKind{}
	val, err := apihelpers.GetSchemaForVersion(crd, version)
	if err != nil {
		k.err = fmt.Errorf("CustomResourceDefinition %s, version %s: %w", crd.Name, version, err)
		return k
	}
	if val != nil && val.OpenAPIV3Schema != nil {
		if k.structural, err = admit.Structural(val); err != nil {
			k.err = fmt.Errorf("CustomResourceDefinition %s, version %s: %w", crd.Name, version, err)
			return k
		}
	}
	doc, err := builder.BuildOpenAPIV3(crd, version, builder.Options{})
	if err == nil {
		k.converter, err = managedfields.NewTypeConverter(doc.Components.Schemas, crd.Spec.PreserveUnknownFields)
	}
	if err != nil {
		k.err = fmt.Errorf("CustomResourceDefinition %s, version %s: building the OpenAPI schema: %w", crd.Name, version, err)
	}
	return k
}

// builtinKind says whether gvk is a built-in kind, judged as a typed object.
func (t *Types) builtinKind(gvk schema.GroupVersionKind) bool {
	_, custom := t.custom[gvk]
	return !custom && t.scheme.Recognizes(gvk)
}

// typeConverter returns the type converter of gvk, nil when the kind is unknown (the API server then refuses
// the request as the MutatingAdmissionPolicy plugin does).
func (t *Types) typeConverter(gvk schema.GroupVersionKind) managedfields.TypeConverter {
	if k, ok := t.custom[gvk]; ok {
		return k.converter
	}
	if t.scheme.Recognizes(gvk) {
		return t.builtin
	}
	return nil
}

// objectInterfaces returns what the API server's admission uses to create, convert and default objects of
// gvk, with mapper for equivalent resources.
func (t *Types) objectInterfaces(gvk schema.GroupVersionKind, mapper runtime.EquivalentResourceMapper) admission.ObjectInterfaces {
	if t.builtinKind(gvk) {
		return schemeInterfaces{ObjectInterfaces: admission.NewObjectInterfacesFromScheme(t.scheme), mapper: mapper}
	}
	var structural *structuralschema.Structural
	if k, ok := t.custom[gvk]; ok {
		structural = k.structural
	}
	return unstructuredInterfaces{gvk: gvk, structural: structural, mapper: mapper}
}

type schemeInterfaces struct {
	admission.ObjectInterfaces
	mapper runtime.EquivalentResourceMapper
}

func (s schemeInterfaces) GetEquivalentResourceMapper() runtime.EquivalentResourceMapper {
	return s.mapper
}

// unstructuredInterfaces are the custom resource handler's object interfaces for one version of a CRD
// (k8s.io/apiextensions-apiserver pkg/apiserver/customresource_handler.go): unstructured objects, defaulted
// from the structural schema. Objects are evaluated in the version they are read in, so the only conversion
// is the identity.
type unstructuredInterfaces struct {
	gvk        schema.GroupVersionKind
	structural *structuralschema.Structural
	mapper     runtime.EquivalentResourceMapper
}

var _ admission.ObjectInterfaces = unstructuredInterfaces{}

func (u unstructuredInterfaces) GetObjectCreater() runtime.ObjectCreater     { return u }
func (u unstructuredInterfaces) GetObjectTyper() runtime.ObjectTyper         { return u }
func (u unstructuredInterfaces) GetObjectDefaulter() runtime.ObjectDefaulter { return u }
func (u unstructuredInterfaces) GetObjectConvertor() runtime.ObjectConvertor { return u }
func (u unstructuredInterfaces) GetEquivalentResourceMapper() runtime.EquivalentResourceMapper {
	return u.mapper
}

// New implements runtime.ObjectCreater.
func (u unstructuredInterfaces) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	out := &unstructured.Unstructured{}
	out.SetGroupVersionKind(kind)
	return out, nil
}

// ObjectKinds implements runtime.ObjectTyper.
func (u unstructuredInterfaces) ObjectKinds(obj runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	return []schema.GroupVersionKind{obj.GetObjectKind().GroupVersionKind()}, false, nil
}

// Recognizes implements runtime.ObjectTyper.
func (u unstructuredInterfaces) Recognizes(gvk schema.GroupVersionKind) bool { return gvk == u.gvk }

// Default implements runtime.ObjectDefaulter as the custom resource handler's unstructuredDefaulter.
func (u unstructuredInterfaces) Default(in runtime.Object) {
	if obj, ok := in.(runtime.Unstructured); ok && u.structural != nil {
		structuraldefaulting.Default(obj.UnstructuredContent(), u.structural)
	}
}

// Convert implements runtime.ObjectConvertor for the identity conversion of one version.
func (u unstructuredInterfaces) Convert(in, out, _ interface{}) error {
	src, ok1 := in.(*unstructured.Unstructured)
	dst, ok2 := out.(*unstructured.Unstructured)
	if !ok1 || !ok2 || src.GroupVersionKind() != dst.GroupVersionKind() && !dst.GroupVersionKind().Empty() {
		return fmt.Errorf("converting %T to %T: the object must be read in the version the policy matches", in, out)
	}
	dst.Object = runtime.DeepCopyJSON(src.Object)
	return nil
}

// ConvertToVersion implements runtime.ObjectConvertor for the identity conversion of one version.
func (u unstructuredInterfaces) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	src, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("converting %T: not a custom resource", in)
	}
	if target, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{src.GroupVersionKind()}); !ok || target != src.GroupVersionKind() {
		return nil, fmt.Errorf("converting %s: the object must be read in the version the policy matches", src.GroupVersionKind())
	}
	return src.DeepCopy(), nil
}

// ConvertFieldLabel implements runtime.ObjectConvertor.
func (u unstructuredInterfaces) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}
