package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/admit"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/manifests"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/views"
)

// ruleSet is what objects are judged with: the compiled policies, the views they read, and how a new object
// becomes what the API server validates.
type ruleSet struct {
	views    engine.Views
	policies []audit.Policy // sorted by key
	set      *engine.Set
	preparer *admit.Preparer
	// fromCluster says the rules were read from a cluster (for messages).
	fromCluster bool
}

// problems is implemented by the compiled policies that know what in them does not compile.
type problems interface{ Problems() []string }

// paramReader is implemented by the compiled policies that read params: of which kinds, and whether their
// bindings' paramRefs can pick a given object (by name or selector).
type paramReader interface {
	ParamKinds() []schema.GroupVersionKind
	ParamScope(obj metav1.Object) (all bool, namespaces []string)
}

// fileRules compiles the rules among the context objects of in and reads the params they name from in.
func fileRules(ctx context.Context, in *checkInputs) (*ruleSet, error) {
	objs := in.contextObjects()
	crds, err := validCRDs(ctx, in.context)
	if err != nil {
		return nil, err
	}
	resources, err := views.FileResources(objs)
	if err != nil {
		return nil, BadInput("%w", err)
	}
	namespaces, err := views.NewFileNamespaces(objs)
	if err != nil {
		return nil, BadInput("%w", err)
	}
	preparer, err := admit.NewPreparer(crds)
	if err != nil {
		return nil, BadInput("%w", err)
	}
	// The params are read once the policies are compiled (which kinds they read, which objects their
	// bindings pick), and the policies read them only when they evaluate: compiled once, before.
	params := &fileParams{FileParams: views.NewFileParams(nil)}
	rs := &ruleSet{preparer: preparer, views: engine.Views{Resources: resources, Namespaces: namespaces, Params: params}}
	if err := rs.compile(objs); err != nil {
		return nil, err
	}
	if err := compileProblems(rs.policies, in.context); err != nil {
		return nil, err
	}
	readers := map[schema.GroupVersionKind][]paramReader{}
	for _, p := range rs.policies {
		if pr, ok := p.(paramReader); ok {
			for _, gvk := range pr.ParamKinds() {
				readers[gvk] = append(readers[gvk], pr)
			}
		}
	}
	if len(readers) == 0 {
		return rs, nil
	}
	read, err := readParams(in, readers, preparer)
	if err != nil {
		return nil, err
	}
	params.FileParams = views.NewFileParams(read)
	return rs, nil
}

// fileParams are the params of rules read from files, set after the policies reading them are compiled.
type fileParams struct{ *views.FileParams }

func (rs *ruleSet) compile(objs []*unstructured.Unstructured) error {
	// The manifests are new objects: MutatingAdmissionPolicies judge them as their CREATE.
	policies, err := engine.Compiler{MAPDefaults: mutate.Defaults{Create: true}}.Compile(objs, rs.views)
	if err != nil {
		return BadInput("invalid policy object: %w", err)
	}
	rs.policies = policies
	rs.set = engine.NewSet(policies...)
	return nil
}

// validCRDs decodes the CustomResourceDefinitions among objs and validates each as the API server validates
// its creation: a CRD it would reject is bad input, with the reasons.
func validCRDs(ctx context.Context, objs []manifests.Object) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() != apiextensionsv1.Kind("CustomResourceDefinition") {
			continue
		}
		if o.GroupVersionKind().Version != apiextensionsv1.SchemeGroupVersion.Version {
			return nil, BadInput("%s: CustomResourceDefinition %s: %s is no longer served; use %s",
				o.Source, o.GetName(), o.GetAPIVersion(), apiextensionsv1.SchemeGroupVersion)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, crd, true); err != nil {
			return nil, BadInput("%s: CustomResourceDefinition %s: %w", o.Source, o.GetName(), err)
		}
		if err := admit.ValidateCRD(ctx, crd); err != nil {
			return nil, BadInput("%s: CustomResourceDefinition %s would be rejected by the API server: %w", o.Source, o.GetName(), err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// compileProblems returns, as bad input, what in the policies read from files does not compile, each named
// with the file and line of its object.
func compileProblems(policies []audit.Policy, objs []manifests.Object) error {
	sources := map[audit.PolicyKey]manifests.Source{}
	for _, o := range objs {
		switch o.GroupVersionKind() {
		case apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"):
			sources[audit.CRDKey(o.GetName())] = o.Source
		case admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"):
			sources[audit.VAPKey(o.GetName())] = o.Source
		case v1alpha1.GroupVersion.WithKind("AuditPolicy"):
			sources[audit.AuditPolicyKey(o.GetName())] = o.Source
		}
	}
	var lines []string
	for _, p := range policies {
		pp, ok := p.(problems)
		if !ok {
			continue
		}
		for _, problem := range pp.Problems() {
			lines = append(lines, fmt.Sprintf("%s: %s %s: %s", sources[p.Key()], policyKind(p.Key()), p.Key().Name, problem))
		}
	}
	if len(lines) > 0 {
		return BadInput("policies that do not compile:\n  %s", strings.Join(lines, "\n  "))
	}
	return nil
}

// notApplied says, for users, what the API server does to a new object before validating it that check
// does not: the MutatingAdmissionPolicies among the rules are applied (see judge), the rest of mutating
// admission is not.
func (rs *ruleSet) notApplied() string {
	for _, p := range rs.policies {
		if p.Key().Source == audit.SourceMAP {
			return admit.NotAppliedButPolicies
		}
	}
	return admit.NotApplied
}

func policyKind(k audit.PolicyKey) string {
	switch k.Source {
	case audit.SourceCRD:
		return "CustomResourceDefinition"
	case audit.SourceAuditPolicy:
		return "AuditPolicy"
	case audit.SourceMAP:
		return "MutatingAdmissionPolicy"
	}
	return "ValidatingAdmissionPolicy"
}

// readParams returns the objects among the context objects and the spooled manifests that a policy's
// bindings can read as params, as the API server stores them. Only those are kept: a paramKind such as
// ConfigMap may be the kind of most of the inputs.
func readParams(in *checkInputs, readers map[schema.GroupVersionKind][]paramReader, preparer *admit.Preparer) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	add := func(src manifests.Source, obj *unstructured.Unstructured) error {
		read := false
		for _, r := range readers[obj.GroupVersionKind()] {
			if all, namespaces := r.ParamScope(obj); all || len(namespaces) > 0 {
				read = true
				break
			}
		}
		if !read {
			return nil
		}
		prepared, err := preparer.Prepare(obj)
		if err != nil {
			return BadInput("%s: %w", src, err)
		}
		out = append(out, prepared)
		return nil
	}
	for _, o := range in.context {
		if len(readers[o.GroupVersionKind()]) > 0 && !isContext(o.Unstructured) {
			if err := add(o.Source, o.Unstructured); err != nil {
				return nil, err
			}
		}
	}
	spooled := false
	for _, k := range in.kinds {
		spooled = spooled || len(readers[k]) > 0
	}
	if !spooled {
		return out, nil
	}
	err := in.each(func(gvk schema.GroupVersionKind) bool { return len(readers[gvk]) > 0 }, func(r record) error {
		obj, err := r.decode()
		if err != nil {
			return BadInput("%w", err)
		}
		return add(r.src, obj)
	})
	return out, err
}

// checkKinds returns, as bad input, the kinds of the inputs that no served resource has: no CRD among the
// rules defines them, or the cluster does not serve them. Each is named with where it first appears.
// AuditPolicies are rules even when their CRD is not among the inputs.
func (rs *ruleSet) checkKinds(in *checkInputs) error {
	where := "no CustomResourceDefinition in the inputs or --rules defines it"
	if rs.fromCluster {
		where = "the cluster does not serve it"
	}
	var lines []string
	check := func(gvk schema.GroupVersionKind, src manifests.Source) {
		if gvk == v1alpha1.GroupVersion.WithKind("AuditPolicy") {
			return
		}
		if _, err := rs.views.Resources.ResourceForKind(gvk); err != nil {
			lines = append(lines, fmt.Sprintf("%s: unknown kind %s in %s: %s", src, gvk.Kind, gvk.GroupVersion(), where))
		}
	}
	for i, gvk := range in.kinds {
		check(gvk, in.firstSeen[i])
	}
	ruleKinds := make([]schema.GroupVersionKind, 0, len(in.ruleKinds))
	for gvk := range in.ruleKinds {
		ruleKinds = append(ruleKinds, gvk)
	}
	slices.SortFunc(ruleKinds, func(a, b schema.GroupVersionKind) int { return strings.Compare(a.String(), b.String()) })
	for _, gvk := range ruleKinds {
		check(gvk, in.ruleKinds[gvk])
	}
	if len(lines) == 1 {
		return BadInput("%s", lines[0])
	}
	if len(lines) > 1 {
		return BadInput("unknown kinds:\n  %s", strings.Join(lines, "\n  "))
	}
	return nil
}

// clusterRules reads the rules of the cluster flags connect to: its discovery, CRDs, policies, bindings,
// AuditPolicies, MutatingAdmissionPolicies and their bindings; namespaces and params are read when a policy needs them.
func clusterRules(ctx context.Context, flags *genericclioptions.ConfigFlags) (*ruleSet, error) {
	c, err := connect(ctx, flags)
	if err != nil {
		return nil, err
	}
	dyn, resolver := c.dynamic, c.resolver
	kinds := []schema.GroupVersionKind{
		apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"),
		admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"),
		admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding"),
		v1alpha1.GroupVersion.WithKind("AuditPolicy"),
		admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicy"),
		admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicyBinding"),
	}
	var objs []*unstructured.Unstructured
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, gvk := range kinds {
		res, err := resolver.ResourceForKind(gvk)
		if err != nil {
			continue // not served: no such rules (AuditPolicies without celaudit installed)
		}
		var listed []*unstructured.Unstructured
		err = listAll(ctx, dyn, res.Resource, "", metav1.ListOptions{}, func(o *unstructured.Unstructured) error {
			listed = append(listed, o)
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, o := range listed {
			o.SetGroupVersionKind(gvk)
			objs = append(objs, o)
			if gvk.Kind == "CustomResourceDefinition" {
				crd := &apiextensionsv1.CustomResourceDefinition{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, crd); err != nil {
					return nil, ClusterError("decoding CustomResourceDefinition %s: %w", o.GetName(), err)
				}
				crds = append(crds, crd)
			}
		}
	}
	preparer, err := admit.NewPreparer(crds)
	if err != nil {
		return nil, ClusterError("the cluster's %w", err)
	}
	rs := &ruleSet{
		fromCluster: true,
		preparer:    preparer,
		views:       c.views(ctx),
	}
	if err := rs.compile(objs); err != nil {
		return nil, ClusterError("the cluster's %w", err)
	}
	return rs, nil
}

// missingParamNotes says, for each binding that found no params for some objects, what its paramRef looks
// for, so that the error results' message of the API server ("no params found ...") is explained.
func missingParamNotes(in *checkInputs, t *tally) []string {
	refs := map[string]*admissionregistrationv1.ParamRef{}
	kinds := map[string]string{} // policy name -> "Kind (apiVersion)"
	for _, o := range in.context {
		switch o.GroupVersionKind() {
		case admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding"):
			b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, b) == nil && b.Spec.ParamRef != nil {
				refs[b.Name] = b.Spec.ParamRef
			}
		case admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"):
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "paramKind", "kind")
			version, _, _ := unstructured.NestedString(o.Object, "spec", "paramKind", "apiVersion")
			kinds[o.GetName()] = kind + " (" + version + ")"
		}
	}
	keys := make([]missingParams, 0, len(t.missingParams))
	for k := range t.missingParams {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b missingParams) int {
		if c := a.policy.Compare(b.policy); c != 0 {
			return c
		}
		return strings.Compare(a.binding+"/"+a.namespace, b.binding+"/"+b.namespace)
	})
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		binding := "binding " + k.binding
		if k.binding == "" {
			binding = "a binding" // the results of a MutatingAdmissionPolicy name it in their message
		}
		note := fmt.Sprintf("%s of %s found no params for %d objects in namespace %s", binding, k.policy, t.missingParams[k], k.namespace)
		if ref, ok := refs[k.binding]; ok && k.policy.Source == audit.SourceVAP {
			ns := ref.Namespace
			if ns == "" {
				ns = k.namespace
			}
			what := "no " + kinds[k.policy.Name]
			if ref.Name != "" {
				what += fmt.Sprintf(" named %q", ref.Name)
			} else if ref.Selector != nil {
				sel, _ := metav1.LabelSelectorAsSelector(ref.Selector)
				what += fmt.Sprintf(" matching %q", sel.String())
			}
			note += fmt.Sprintf(": %s in namespace %s among the inputs", what, ns)
		}
		out = append(out, note)
	}
	return out
}
