package engine

import (
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/mutate"
)

// policyKind names the kinds of the policy objects Compile reads.
type policyKind int

const (
	notPolicy policyKind = iota
	crdKind
	vapKind
	bindingKind
	auditPolicyKind
	mapKind
	mapBindingKind
)

func kindOf(obj *unstructured.Unstructured) policyKind {
	switch gvk := obj.GroupVersionKind(); {
	case gvk == apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"):
		return crdKind
	case gvk == admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"):
		return vapKind
	case gvk == admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding"):
		return bindingKind
	case gvk == v1alpha1.GroupVersion.WithKind("AuditPolicy"):
		return auditPolicyKind
	case gvk == admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicy"):
		return mapKind
	case gvk == admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicyBinding"):
		return mapBindingKind
	}
	return notPolicy
}

// IsPolicyObject reports whether obj is one of the objects Compile turns into policies or bindings.
func IsPolicyObject(obj *unstructured.Unstructured) bool {
	return kindOf(obj) != notPolicy
}

// Compile compiles the CustomResourceDefinitions, ValidatingAdmissionPolicies, AuditPolicies and
// MutatingAdmissionPolicies among objs, the policies bound to the bindings among objs and to views, into
// policies sorted by key. The MutatingAdmissionPolicies are bound together, as one chain (see BindMAPs), with
// the CRDs among objs and views.CRDs. Other objects are ignored.
// An object of those kinds that does not decode is an error naming it: a front end reading files says
// which one is wrong rather than auditing without it.
func (c Compiler) Compile(objs []*unstructured.Unstructured, views Views) ([]audit.Policy, error) {
	var d decoded
	var errs []string
	for _, obj := range objs {
		if err := d.add(obj); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	slices.SortFunc(d.bindings, func(a, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) int {
		return strings.Compare(a.Name, b.Name)
	})
	out := make([]audit.Policy, 0, len(d.crds)+len(d.policies)+len(d.audits)+len(d.maps))
	for _, crd := range d.crds {
		out = append(out, c.CRD(crd))
	}
	for _, p := range d.policies {
		out = append(out, Bind(c.VAP(p), d.bindings, views))
	}
	for _, ap := range d.audits {
		compiled, binding := c.AuditPolicy(ap)
		out = append(out, Bind(compiled, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding}, views))
	}
	if len(d.maps) > 0 {
		compiled := make([]*mutate.Compiled, len(d.maps))
		for i, p := range d.maps {
			compiled[i] = c.MAP(p)
		}
		withOwn := views
		withOwn.CRDs = withCRDs(views.CRDs, d.crds)
		out = append(out, c.BindMAPs(compiled, d.mapBindings, withOwn)...)
	}
	slices.SortFunc(out, audit.ComparePolicies)
	return out, nil
}

// decoded holds the policy objects Compile reads, decoded.
type decoded struct {
	crds        []*apiextensionsv1.CustomResourceDefinition
	policies    []*admissionregistrationv1.ValidatingAdmissionPolicy
	bindings    []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	audits      []*v1alpha1.AuditPolicy
	maps        []*admissionregistrationv1.MutatingAdmissionPolicy
	mapBindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
}

// add decodes obj when it is a policy object; it ignores other objects.
func (d *decoded) add(obj *unstructured.Unstructured) error {
	switch kindOf(obj) {
	case crdKind:
		return decodeInto(obj, &d.crds)
	case vapKind:
		return decodeInto(obj, &d.policies)
	case bindingKind:
		return decodeInto(obj, &d.bindings)
	case auditPolicyKind:
		return decodeInto(obj, &d.audits)
	case mapKind:
		return decodeInto(obj, &d.maps)
	case mapBindingKind:
		return decodeInto(obj, &d.mapBindings)
	}
	return nil
}

// decodeInto decodes obj into a new T and appends it to list.
func decodeInto[T any, PT interface {
	*T
	runtime.Object
}](obj *unstructured.Unstructured, list *[]PT) error {
	into := PT(new(T))
	if err := fromUnstructured(obj, into); err != nil {
		return err
	}
	*list = append(*list, into)
	return nil
}

// withCRDs returns base with the CRDs of extra in place of those of the same name, and extra's others added.
func withCRDs(base, extra []*apiextensionsv1.CustomResourceDefinition) []*apiextensionsv1.CustomResourceDefinition {
	names := map[string]bool{}
	for _, crd := range extra {
		names[crd.Name] = true
	}
	out := slices.Clone(extra)
	for _, crd := range base {
		if !names[crd.Name] {
			out = append(out, crd)
		}
	}
	return out
}

func fromUnstructured(obj *unstructured.Unstructured, into runtime.Object) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, into, true); err != nil {
		return fmt.Errorf("%s %q: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}
