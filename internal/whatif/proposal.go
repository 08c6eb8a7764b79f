package whatif

import (
	"context"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresourcedefinition"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"
	admissionregistrationinstall "k8s.io/kubernetes/pkg/apis/admissionregistration/install"
	admissionregistrationvalidation "k8s.io/kubernetes/pkg/apis/admissionregistration/validation"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/manifests"
)

// Proposal is the decoded proposed objects.
type Proposal struct {
	CRDs          []*apiextensionsv1.CustomResourceDefinition
	VAPs          []*admissionregistrationv1.ValidatingAdmissionPolicy
	Bindings      []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	AuditPolicies []*v1alpha1.AuditPolicy
	// MAPs and MAPBindings are the proposed MutatingAdmissionPolicies and their bindings.
	MAPs        []*admissionregistrationv1.MutatingAdmissionPolicy
	MAPBindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	// Objects are the other proposed objects: param objects and namespaces, which the proposed and live
	// policies read instead of the live ones of the same kind and name.
	Objects []*unstructured.Unstructured

	sources map[objectID]manifests.Source
}

// objectID names a proposed object in messages and tells which source it was read from.
type objectID struct {
	kind, namespace, name string
}

func idOf(obj *unstructured.Unstructured) objectID {
	return objectID{kind: obj.GetKind(), namespace: obj.GetNamespace(), name: obj.GetName()}
}

// InputError lists what is wrong with the proposed objects, each problem starting with its file and line.
// Nothing was evaluated: an invalid proposal would be rejected before it changed anything.
type InputError struct {
	Problems []string
}

func (e *InputError) Error() string { return strings.Join(e.Problems, "\n") }

// Decode reads the proposed objects. served tells whether the cluster serves a kind; the kinds of the
// proposed CRDs count as served. An object of a kind nobody serves, or a policy object that does not decode
// strictly (unknown or mistyped fields), is a problem of the returned *InputError.
func Decode(objs []manifests.Object, served func(schema.GroupVersionKind) bool) (*Proposal, error) {
	p := &Proposal{sources: map[objectID]manifests.Source{}}
	var problems []string
	for _, o := range objs {
		p.sources[idOf(o.Unstructured)] = o.Source
	}
	proposedKinds := crdKinds(objs)
	for _, o := range objs {
		if err := p.add(o.Unstructured, served, proposedKinds); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s %s: %v", o.Source, o.GetKind(), objectName(o.Unstructured), err))
		}
	}
	if len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	return p, nil
}

// crdKinds returns the kinds, in each version, that the CustomResourceDefinitions among objs define.
func crdKinds(objs []manifests.Object) map[schema.GroupVersionKind]bool {
	out := map[schema.GroupVersionKind]bool{}
	for _, o := range objs {
		if o.GroupVersionKind() != apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition") {
			continue
		}
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		for _, v := range versions {
			if m, ok := v.(map[string]any); ok {
				if name, ok := m["name"].(string); ok {
					out[schema.GroupVersionKind{Group: group, Version: name, Kind: kind}] = true
				}
			}
		}
	}
	return out
}

// add decodes obj into the proposal: a policy object strictly, any other object when its kind is served or
// proposed.
func (p *Proposal) add(obj *unstructured.Unstructured, served func(schema.GroupVersionKind) bool, proposedKinds map[schema.GroupVersionKind]bool) error {
	var err error
	switch gvk := obj.GroupVersionKind(); {
	case gvk.GroupKind() == apiextensionsv1.Kind("CustomResourceDefinition"):
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err = decodeStrict(obj, gvk, apiextensionsv1.SchemeGroupVersion, crd); err == nil {
			p.CRDs = append(p.CRDs, crd)
		}
	case gvk.GroupKind() == admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy").GroupKind():
		vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		if err = decodeStrict(obj, gvk, admissionregistrationv1.SchemeGroupVersion, vap); err == nil {
			p.VAPs = append(p.VAPs, vap)
		}
	case gvk.GroupKind() == admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding").GroupKind():
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		if err = decodeStrict(obj, gvk, admissionregistrationv1.SchemeGroupVersion, b); err == nil {
			p.Bindings = append(p.Bindings, b)
		}
	case gvk.GroupKind() == v1alpha1.GroupVersion.WithKind("AuditPolicy").GroupKind():
		ap := &v1alpha1.AuditPolicy{}
		if err = decodeStrict(obj, gvk, v1alpha1.GroupVersion, ap); err == nil {
			p.AuditPolicies = append(p.AuditPolicies, ap)
		}
	case gvk.GroupKind() == admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicy").GroupKind():
		m := &admissionregistrationv1.MutatingAdmissionPolicy{}
		if err = decodeStrict(obj, gvk, admissionregistrationv1.SchemeGroupVersion, m); err == nil {
			p.MAPs = append(p.MAPs, m)
		}
	case gvk.GroupKind() == admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicyBinding").GroupKind():
		b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
		if err = decodeStrict(obj, gvk, admissionregistrationv1.SchemeGroupVersion, b); err == nil {
			p.MAPBindings = append(p.MAPBindings, b)
		}
	case served(gvk) || proposedKinds[gvk]:
		p.Objects = append(p.Objects, obj)
	default:
		err = fmt.Errorf("unknown kind %s: the cluster does not serve it and no proposed CustomResourceDefinition defines it", gvk)
	}
	return err
}

func objectName(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() != "" {
		return obj.GetNamespace() + "/" + obj.GetName()
	}
	return obj.GetName()
}

// decodeStrict decodes obj into a typed object of version want, failing on unknown or mistyped fields as the
// API server's strict field validation does.
func decodeStrict(obj *unstructured.Unstructured, gvk schema.GroupVersionKind, want schema.GroupVersion, into runtime.Object) error {
	if gvk.GroupVersion() != want {
		return fmt.Errorf("%s is not served: use %s", gvk.GroupVersion(), want)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, into, true); err != nil {
		return err
	}
	return nil
}

// source returns where the proposed cluster-scoped object of kind and name was read, for messages.
func (p *Proposal) source(kind, name string) string {
	if s, ok := p.sources[objectID{kind: kind, name: name}]; ok {
		return s.String()
	}
	return "<proposal>"
}

// ValidateCRDs checks each proposed CRD as the API server validates a write of it: a create when live holds
// no CRD of that name, an update of the live one otherwise (which also forbids, for instance, removing a
// stored version or changing the scope). Every field error is a problem of the returned *InputError.
func (p *Proposal) ValidateCRDs(ctx context.Context, live map[string]*apiextensionsv1.CustomResourceDefinition) error {
	scheme := runtime.NewScheme()
	apiextensionsinstall.Install(scheme)
	strategy := customresourcedefinition.NewStrategy(scheme)
	var problems []string
	for _, crd := range p.CRDs {
		proposed, err := internalCRD(scheme, crd)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: CustomResourceDefinition %s: %v", p.source("CustomResourceDefinition", crd.Name), crd.Name, err))
			continue
		}
		var errs []string
		if old, ok := live[crd.Name]; ok {
			oldInternal, err := internalCRD(scheme, old)
			if err != nil {
				return fmt.Errorf("converting the live CustomResourceDefinition %s: %w", crd.Name, err)
			}
			// What kubectl apply sends carries the live object's identity and version.
			proposed.UID, proposed.ResourceVersion = oldInternal.UID, oldInternal.ResourceVersion
			proposed.CreationTimestamp, proposed.Generation = oldInternal.CreationTimestamp, oldInternal.Generation
			strategy.PrepareForUpdate(ctx, proposed, oldInternal)
			for _, e := range strategy.ValidateUpdate(ctx, proposed, oldInternal) {
				errs = append(errs, e.Error())
			}
		} else {
			strategy.PrepareForCreate(ctx, proposed)
			for _, e := range strategy.Validate(ctx, proposed) {
				errs = append(errs, e.Error())
			}
		}
		if len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("%s: the API server would reject CustomResourceDefinition %s: %s",
				p.source("CustomResourceDefinition", crd.Name), crd.Name, strings.Join(errs, "; ")))
		}
	}
	if len(problems) > 0 {
		return &InputError{Problems: problems}
	}
	return nil
}

// internalCRD returns crd defaulted and converted to the internal version, as the API server validates it.
func internalCRD(scheme *runtime.Scheme, crd *apiextensionsv1.CustomResourceDefinition) (*apiextensionsinternal.CustomResourceDefinition, error) {
	v1 := crd.DeepCopy()
	scheme.Default(v1)
	out := &apiextensionsinternal.CustomResourceDefinition{}
	if err := scheme.Convert(v1, out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// ValidateMAPs checks each proposed MutatingAdmissionPolicy and binding as the API server validates its
// creation (required fields, expressions that compile): one it would reject cannot be rolled out, and is a
// problem of the returned *InputError.
func (p *Proposal) ValidateMAPs() error {
	scheme := runtime.NewScheme()
	admissionregistrationinstall.Install(scheme)
	var problems []string
	add := func(kind, name string, errs field.ErrorList, err error) {
		if err != nil {
			errs = append(errs, field.InternalError(nil, err))
		}
		if len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("%s: the API server would reject %s %s: %v", p.source(kind, name), kind, name, errs.ToAggregate()))
		}
	}
	for _, m := range p.MAPs {
		internal := &admissionregistration.MutatingAdmissionPolicy{}
		err := internalOf(scheme, m.DeepCopy(), internal)
		add("MutatingAdmissionPolicy", m.Name, admissionregistrationvalidation.ValidateMutatingAdmissionPolicy(internal), err)
	}
	for _, b := range p.MAPBindings {
		internal := &admissionregistration.MutatingAdmissionPolicyBinding{}
		err := internalOf(scheme, b.DeepCopy(), internal)
		add("MutatingAdmissionPolicyBinding", b.Name, admissionregistrationvalidation.ValidateMutatingAdmissionPolicyBinding(internal), err)
	}
	if len(problems) > 0 {
		return &InputError{Problems: problems}
	}
	return nil
}

// internalOf defaults obj as the API server stores it and converts it into the internal version.
func internalOf(scheme *runtime.Scheme, obj, into runtime.Object) error {
	scheme.Default(obj)
	return scheme.Convert(obj, into, nil)
}
