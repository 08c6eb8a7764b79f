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
)

// policyKind names the kinds of the policy objects Compile reads.
type policyKind int

const (
	notPolicy policyKind = iota
	crdKind
	vapKind
	bindingKind
	auditPolicyKind
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
	}
	return notPolicy
}

// IsPolicyObject reports whether obj is one of the objects Compile turns into policies or bindings.
func IsPolicyObject(obj *unstructured.Unstructured) bool {
	return kindOf(obj) != notPolicy
}

// Compile compiles the CustomResourceDefinitions, ValidatingAdmissionPolicies and AuditPolicies among objs, the policies
// bound to the bindings among objs and to views, into policies sorted by key. Other objects are ignored.
// An object of those kinds that does not decode is an error naming it: a front end reading files says
// which one is wrong rather than auditing without it.
func (c Compiler) Compile(objs []*unstructured.Unstructured, views Views) ([]audit.Policy, error) {
	var (
		crds     []*apiextensionsv1.CustomResourceDefinition
		policies []*admissionregistrationv1.ValidatingAdmissionPolicy
		bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
		audits   []*v1alpha1.AuditPolicy
		errs     []string
	)
	for _, obj := range objs {
		var err error
		switch kindOf(obj) {
		case crdKind:
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err = fromUnstructured(obj, crd); err == nil {
				crds = append(crds, crd)
			}
		case vapKind:
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err = fromUnstructured(obj, p); err == nil {
				policies = append(policies, p)
			}
		case bindingKind:
			b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			if err = fromUnstructured(obj, b); err == nil {
				bindings = append(bindings, b)
			}
		case auditPolicyKind:
			ap := &v1alpha1.AuditPolicy{}
			if err = fromUnstructured(obj, ap); err == nil {
				audits = append(audits, ap)
			}
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	slices.SortFunc(bindings, func(a, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) int {
		return strings.Compare(a.Name, b.Name)
	})
	out := make([]audit.Policy, 0, len(crds)+len(policies)+len(audits))
	for _, crd := range crds {
		out = append(out, c.CRD(crd))
	}
	for _, p := range policies {
		out = append(out, Bind(c.VAP(p), bindings, views))
	}
	for _, ap := range audits {
		compiled, binding := c.AuditPolicy(ap)
		out = append(out, Bind(compiled, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding}, views))
	}
	slices.SortFunc(out, audit.ComparePolicies)
	return out, nil
}

func fromUnstructured(obj *unstructured.Unstructured, into runtime.Object) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, into, true); err != nil {
		return fmt.Errorf("%s %q: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}
