package admit

import (
	"context"
	"encoding/json"
	"fmt"

	apihelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"
)

// NotApplied lists, for users, what the API server does to a new object before validating it that Prepare
// does not do.
const NotApplied = "system metadata (uid, creationTimestamp), the built-in objects' PrepareForCreate " +
	"(e.g. a Pod's status.phase and qosClass) and mutating admission (ServiceAccount token volumes, " +
	"DefaultTolerationSeconds, LimitRanger, mutating webhooks and policies)"

// NotAppliedButPolicies is NotApplied where the MutatingAdmissionPolicies are applied (kubectl celaudit check
// given some): the rest of mutating admission is still not.
const NotAppliedButPolicies = "system metadata (uid, creationTimestamp), the built-in objects' PrepareForCreate " +
	"(e.g. a Pod's status.phase and qosClass) and mutating admission other than MutatingAdmissionPolicies " +
	"(ServiceAccount token volumes, DefaultTolerationSeconds, LimitRanger, mutating webhooks)"

// customVersion is what creating a custom resource of one version of a CRD needs.
type customVersion struct {
	structural *structuralschema.Structural // nil when the version has no schema
	status     bool                         // the status subresource is enabled: CREATE drops status
}

// Preparer prepares objects of the built-in kinds and of the kinds of a fixed set of CRDs.
type Preparer struct {
	scheme *runtime.Scheme
	custom map[schema.GroupVersionKind]customVersion
}

// NewPreparer returns a Preparer for the built-in kinds and the served versions of crds. A version whose
// schema is not structural is an error (the API server would not have accepted the CRD; see ValidateCRD).
func NewPreparer(crds []*apiextensionsv1.CustomResourceDefinition) (*Preparer, error) {
	p := &Preparer{scheme: builtinScheme(), custom: map[schema.GroupVersionKind]customVersion{}}
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			cv, err := newCustomVersion(crd, v.Name)
			if err != nil {
				return nil, fmt.Errorf("CustomResourceDefinition %s, version %s: %w", crd.Name, v.Name, err)
			}
			p.custom[schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}] = cv
		}
	}
	return p, nil
}

func newCustomVersion(crd *apiextensionsv1.CustomResourceDefinition, version string) (customVersion, error) {
	var cv customVersion
	sub, err := apihelpers.GetSubresourcesForVersion(crd, version)
	if err != nil {
		return cv, fmt.Errorf("getting the subresources: %w", err)
	}
	cv.status = sub != nil && sub.Status != nil
	val, err := apihelpers.GetSchemaForVersion(crd, version)
	if err != nil {
		return cv, fmt.Errorf("getting the schema: %w", err)
	}
	if val == nil || val.OpenAPIV3Schema == nil {
		return cv, nil
	}
	cv.structural, err = Structural(val)
	return cv, err
}

// Structural returns the structural schema of a version's validation, as the API server builds it.
func Structural(val *apiextensionsv1.CustomResourceValidation) (*structuralschema.Structural, error) {
	internal := &apiextensionsinternal.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(val, internal, nil); err != nil {
		return nil, fmt.Errorf("converting the schema to the internal version: %w", err)
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("the schema is not structural: %w", err)
	}
	return s, nil
}

// Builtin reports whether gvk is a built-in kind whose defaults Prepare applies.
func (p *Preparer) Builtin(gvk schema.GroupVersionKind) bool {
	return p.scheme.Recognizes(gvk)
}

// Prepare returns obj as the API server validates a CREATE of it (see the package documentation). obj is not
// modified. An object of a kind Prepare knows nothing of is returned as it is; a built-in object that does
// not decode into its type is an error saying why, as the API server would reject it.
func (p *Preparer) Prepare(obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	if cv, ok := p.custom[gvk]; ok {
		out := obj.DeepCopy()
		pruneAndDefault(out.Object, cv.structural)
		if cv.status {
			delete(out.Object, "status")
		}
		out.SetGeneration(1)
		return out, nil
	}
	if !p.scheme.Recognizes(gvk) {
		return obj, nil
	}
	typed, err := p.scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, typed); err != nil {
		return nil, fmt.Errorf("decoding %s %q: %w", gvk.Kind, obj.GetName(), decodeError(obj, typed, err))
	}
	return p.defaulted(gvk, typed)
}

// PrepareJSON is Prepare of the object whose JSON is data and whose kind is gvk. A built-in object is decoded
// straight into its Go type, as the API server decodes a request body (case-sensitive, unknown fields
// dropped), which spares the unstructured form a round trip.
func (p *Preparer) PrepareJSON(gvk schema.GroupVersionKind, data []byte) (*unstructured.Unstructured, error) {
	if _, custom := p.custom[gvk]; custom || !p.scheme.Recognizes(gvk) {
		content := map[string]any{}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &content); err != nil {
			return nil, err
		}
		return p.Prepare(&unstructured.Unstructured{Object: content})
	}
	typed, err := p.scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, typed); err != nil {
		name := ""
		if accessor, aerr := meta.Accessor(typed); aerr == nil {
			name = accessor.GetName()
		}
		return nil, fmt.Errorf("decoding %s %q: %w", gvk.Kind, name, err)
	}
	return p.defaulted(gvk, typed)
}

// defaulted applies the defaults of typed, of kind gvk, and returns it unstructured.
func (p *Preparer) defaulted(gvk schema.GroupVersionKind, typed runtime.Object) (*unstructured.Unstructured, error) {
	p.scheme.Default(typed)
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", gvk.Kind, err)
	}
	out := &unstructured.Unstructured{Object: content}
	out.SetGroupVersionKind(gvk) // typed objects carry no apiVersion and kind
	return out, nil
}

// decodeError explains why obj does not decode into typed as the API server's JSON decoder does, naming the
// field (the unstructured converter's errors do not), or returns err when that decoder has nothing to say.
func decodeError(obj *unstructured.Unstructured, typed runtime.Object, err error) error {
	data, merr := obj.MarshalJSON()
	if merr != nil {
		return err
	}
	if jerr := json.Unmarshal(data, typed); jerr != nil {
		return jerr
	}
	return err
}

// pruneAndDefault prunes and defaults a custom resource's content in place by its version's structural
// schema s, in the API server's order: unknown fields pruned at decoding, then the nulls of non-nullable
// fields without default dropped, then defaults applied. A nil s changes nothing.
func pruneAndDefault(content map[string]any, s *structuralschema.Structural) {
	if s == nil {
		return
	}
	structuralpruning.Prune(content, s, true)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(content, s)
	structuraldefaulting.Default(content, s)
}

// ValidateCRD validates crd as the API server validates its creation: defaulted, converted to the internal
// version, then checked by apiextensions-apiserver's validation. It returns the reasons the API server would
// give for rejecting it, nil when it would accept it.
func ValidateCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	defaulted := crd.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(defaulted)
	internal := &apiextensionsinternal.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(defaulted, internal, nil); err != nil {
		return fmt.Errorf("converting to the internal version: %w", err)
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(ctx, internal); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}
