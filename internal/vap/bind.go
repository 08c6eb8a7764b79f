package vap

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"

	"github.com/celaudit/celaudit/internal/audit"
)

// Policy is a compiled ValidatingAdmissionPolicy applied to its bindings and to the cluster's resources: the
// audit.Policy evaluated per object. It is immutable and safe for concurrent use.
type Policy struct {
	compiled *Compiled
	deps     Deps
	matcher  generic.PolicyMatcher
	objects  objectInterfaces

	bindings  []*boundBinding
	resources []schema.GroupVersionResource
	// templates holds the workload resources whose pod templates are evaluated as Pods; nil unless the
	// policy expands pod templates (see expandingPodTemplates).
	templates map[schema.GroupVersionResource]bool

	// paramConfigErr fails every evaluation that matches, as the apiserver's hook ConfigurationError does.
	paramConfigErr error
	// paramsWithheld, when not nil, is why the params of the policy's paramKind are never read (see
	// ParamWithholder): bindings with a paramRef give it as an error result.
	paramsWithheld error
	paramScope     meta.RESTScope
	params         *paramCache
}

var _ audit.Policy = &Policy{}

// boundBinding is one binding (or, for an unbound policy, the implicit audit binding) and where it applies.
type boundBinding struct {
	binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding // defaulted copy
	// name is "" for the implicit binding of an unbound policy.
	name    string
	actions string
	deny    bool
	// plans maps an equivalence class of resources to how objects of that class are evaluated.
	plans map[string]Plan
}

// Bind applies the policy's bindings (those whose spec.policyName names it; others are ignored) and the
// cluster's resources as deps.Resolver serves them. Without bindings the policy is audited as if bound with
// empty matchResources and validationActions [Audit]. Bind again when bindings or discovery change; namespaces
// and params are read at evaluation time. A policy annotated celaudit.io/expand-pod-templates: "true" is
// bound expanding pod templates (see expandingPodTemplates), so that every front end binding it agrees.
func (c *Compiled) Bind(bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding, deps Deps) *Policy {
	lister := namespaceLister{getter: deps.Namespaces}
	p := &Policy{
		compiled: c,
		deps:     deps,
		matcher:  newSelectorCachingMatcher(matching.NewMatcher(lister, namespaceClient{lister: lister})),
		objects:  objectInterfaces{mapper: deps.Resolver},
		params:   &paramCache{},
	}
	for _, b := range bindings {
		if b == nil || b.Spec.PolicyName != c.policy.Name {
			continue
		}
		p.bindings = append(p.bindings, newBoundBinding(defaultBinding(b), b.Name))
	}
	slices.SortFunc(p.bindings, func(a, b *boundBinding) int { return strings.Compare(a.name, b.name) })
	if len(p.bindings) == 0 {
		p.bindings = []*boundBinding{newBoundBinding(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        c.policy.Name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
			},
		}, "")}
	}

	switch {
	case c.paramKindErr != nil:
		p.paramConfigErr = c.paramKindErr
	case c.paramKind != nil && deps.Resolver == nil:
		p.paramConfigErr = fmt.Errorf("failed to find resource referenced by paramKind: '%v'", *c.paramKind)
	case c.paramKind != nil:
		if w, ok := deps.Params.(ParamWithholder); ok {
			p.paramsWithheld = w.ParamsWithheld(*c.paramKind)
		}
		res, err := deps.Resolver.ResourceForKind(*c.paramKind)
		if err != nil {
			// The apiserver's message (policy_source.go, ensureParamsForPolicyLocked).
			p.paramConfigErr = fmt.Errorf("failed to find resource referenced by paramKind: '%v'", *c.paramKind)
		} else if res.Namespaced {
			p.paramScope = meta.RESTScopeNamespace
		} else {
			p.paramScope = meta.RESTScopeRoot
		}
	}

	p.plan()
	if c.expandPodTemplates {
		return p.expandingPodTemplates()
	}
	return p
}

func newBoundBinding(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, name string) *boundBinding {
	actions := make([]string, len(b.Spec.ValidationActions))
	for i, a := range b.Spec.ValidationActions {
		actions[i] = string(a)
	}
	return &boundBinding{
		binding: b,
		name:    name,
		actions: strings.Join(actions, ","),
		deny:    slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny),
		plans:   map[string]Plan{},
	}
}

// Key implements audit.Policy.
func (p *Policy) Key() audit.PolicyKey { return p.compiled.key }

// Resources implements audit.Policy: for each class of equivalent resources some binding applies to, the
// version the policy's rules name (preferring the resolver's order), i.e. the version the apiserver would
// evaluate a request in.
func (p *Policy) Resources() []schema.GroupVersionResource { return slices.Clone(p.resources) }

// ParamKinds lists the kinds of param objects the policy reads; the controller re-audits when they change.
func (p *Policy) ParamKinds() []schema.GroupVersionKind {
	if p.compiled.paramKind == nil {
		return nil
	}
	return []schema.GroupVersionKind{*p.compiled.paramKind}
}

// DependsOnNamespaces says whether results depend on namespaces (labels through a namespaceSelector, or the
// namespaceObject variable), so that namespace changes call for a re-audit.
func (p *Policy) DependsOnNamespaces() bool {
	if p.compiled.readsNamespaceObject || selectsNamespaces(p.compiled.policy.Spec.MatchConstraints) {
		return true
	}
	for _, b := range p.bindings {
		if selectsNamespaces(b.binding.Spec.MatchResources) {
			return true
		}
	}
	return false
}

// Subresources returns the subresources the policy's rules cover with some binding (see CoveredSubresources).
func (p *Policy) Subresources() []string {
	bindings := make([]*admissionregistrationv1.ValidatingAdmissionPolicyBinding, 0, len(p.bindings))
	for _, b := range p.bindings {
		bindings = append(bindings, b.binding)
	}
	return CoveredSubresources(p.compiled.policy, bindings)
}

// CoveredSubresources returns the resources of the policy's matchConstraints rules that name subresources
// ("deployments/scale", "*/status", "*/*"), sorted and without duplicates, when some binding covers
// subresources too (it has no resource rules of its own, or one of them names a subresource); bindings are
// those of the policy. The API server judges requests to those subresources; they write no stored object
// that an audit could read, so the audit judges none of them. nil when the rules name none.
func CoveredSubresources(policy *admissionregistrationv1.ValidatingAdmissionPolicy,
	bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) []string {
	named := subresourceRules(policy.Spec.MatchConstraints)
	if len(named) == 0 {
		return nil
	}
	if len(bindings) == 0 {
		return named // audited as bound with empty matchResources
	}
	for _, b := range bindings {
		if m := b.Spec.MatchResources; m == nil || len(m.ResourceRules) == 0 || len(subresourceRules(m)) > 0 {
			return named
		}
	}
	return nil
}

// subresourceRules returns the resources of m's rules that name a subresource, sorted, without duplicates.
func subresourceRules(m *admissionregistrationv1.MatchResources) []string {
	if m == nil {
		return nil
	}
	var out []string
	for _, r := range m.ResourceRules {
		for _, res := range r.Resources {
			if strings.Contains(res, "/") {
				out = append(out, res)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func selectsNamespaces(m *admissionregistrationv1.MatchResources) bool {
	if m == nil || m.NamespaceSelector == nil {
		return false
	}
	return len(m.NamespaceSelector.MatchLabels) > 0 || len(m.NamespaceSelector.MatchExpressions) > 0
}

// admissionConfigResources are never subject to API-defined policies (k8s.io/apiserver generic/plugin.go,
// admissionResources); excludedResources are not persisted and excluded from all policies
// (k8s.io/kubernetes pkg/kubeapiserver/admission/exclusion).
func exempt(gr schema.GroupResource) bool {
	switch gr.Group {
	case admissionregistrationv1.GroupName:
		switch gr.Resource {
		case "validatingadmissionpolicies", "validatingadmissionpolicybindings",
			"mutatingadmissionpolicies", "mutatingadmissionpolicybindings":
			return true
		}
	case "authentication.k8s.io":
		return gr.Resource == "selfsubjectreviews" || gr.Resource == "tokenreviews"
	case "authorization.k8s.io":
		switch gr.Resource {
		case "localsubjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews", "subjectaccessreviews":
			return true
		}
	}
	return false
}

// ownReport reports whether gr holds the reports celaudit writes. A policy matching every resource would
// otherwise audit them, and each report write would be followed by an evaluation of the report and often by
// another write. They are audited only for a policy or binding whose rules name them.
func ownReport(gr schema.GroupResource) bool {
	return gr.Group == "wgpolicyk8s.io" && (gr.Resource == "policyreports" || gr.Resource == "clusterpolicyreports")
}

// namesOwnReports reports whether some resource rule of ms names one of celaudit's report resources
// literally: its group and its resource, not "*".
func namesOwnReports(ms ...*admissionregistrationv1.MatchResources) bool {
	for _, m := range ms {
		if m == nil {
			continue
		}
		for _, r := range m.ResourceRules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					name, _, _ := strings.Cut(res, "/")
					if ownReport(schema.GroupResource{Group: g, Resource: name}) {
						return true
					}
				}
			}
		}
	}
	return false
}

// plan decides, per binding and class of equivalent resources, which request the audit simulates and in
// which version it reads objects. It asks the apiserver's matcher about each served resource with the
// object-level criteria (selectors, resourceNames) removed: they are decided per object at evaluation.
// The first operation the binding matches wins (CREATE, then UPDATE, then DELETE); within it a resource the
// rules name directly (no conversion) is preferred, in the resolver's order.
func (p *Policy) plan() {
	if p.deps.Resolver == nil || p.compiled.policy.Spec.MatchConstraints == nil {
		return
	}
	served := p.deps.Resolver.ServedResources()
	definition := p.compiled.policy.DeepCopy()
	definition.Spec.MatchConstraints = resourceLevel(definition.Spec.MatchConstraints)
	definitionAccessor := validating.NewValidatingAdmissionPolicyAccessor(definition)
	readable := map[schema.GroupVersionResource]bool{}
	for _, r := range served {
		readable[r.Resource] = r.Auditable
	}
	for _, b := range p.bindings {
		p.planBinding(b, served, readable, definitionAccessor)
	}

	reads := map[schema.GroupVersionResource]bool{}
	for _, b := range p.bindings {
		for _, pl := range b.plans {
			reads[pl.Read] = true
		}
	}
	for _, r := range served {
		if reads[r.Resource] {
			p.resources = append(p.resources, r.Resource)
			delete(reads, r.Resource)
		}
	}
}

// planBinding fills b.plans: for each operation in turn, the classes of served resources the policy's
// definition (resource-level) and b match that an earlier operation did not, and how each is read.
func (p *Policy) planBinding(b *boundBinding, served []APIResource, readable map[schema.GroupVersionResource]bool,
	definition generic.PolicyAccessor) {
	binding := b.binding.DeepCopy()
	binding.Spec.MatchResources = resourceLevel(binding.Spec.MatchResources)
	bindingAccessor := validating.NewValidatingAdmissionPolicyBindingAccessor(binding)
	reports := namesOwnReports(p.compiled.policy.Spec.MatchConstraints, b.binding.Spec.MatchResources)
	for _, op := range []admission.Operation{admission.Create, admission.Update, admission.Delete} {
		direct, converted := PlanOperation(served, op, PlanFuncs{
			Class: p.classKey,
			Done:  func(class string) bool { _, done := b.plans[class]; return done },
			Skip:  func(gr schema.GroupResource) bool { return exempt(gr) || ownReport(gr) && !reports },
			Matches: func(attrs admission.Attributes, _ APIResource) (schema.GroupVersionResource, bool) {
				matches, read, _, err := p.matcher.DefinitionMatches(attrs, p.objects, definition)
				if err != nil || !matches || !readable[read] {
					return read, false
				}
				ok, err := p.matcher.BindingMatches(attrs, p.objects, bindingAccessor)
				return read, err == nil && ok
			},
		})
		maps.Copy(b.plans, converted)
		maps.Copy(b.plans, direct)
	}
}

// Plan says how objects of one class of equivalent resources are evaluated: as requests for Request, on
// objects read at Read (the resource the policy's rules name, to which the API server would convert).
type Plan struct {
	Request APIResource
	Read    schema.GroupVersionResource
}

// PlanFuncs are what PlanOperation asks of the policy it plans reads for.
type PlanFuncs struct {
	// Class identifies the class of resources equivalent to a resource.
	Class func(schema.GroupVersionResource) string
	// Done reports whether a class is planned already (by an earlier operation).
	Done func(class string) bool
	// Skip reports whether a resource is left out whatever the policy says.
	Skip func(schema.GroupResource) bool
	// Matches reports whether the policy and one of its bindings match a request, resource-level, and the
	// resource the API server would evaluate it at.
	Matches func(attrs admission.Attributes, r APIResource) (read schema.GroupVersionResource, ok bool)
}

// PlanOperation plans, for an op request, the classes of served resources that are not Done and that the
// policy Matches: per class the first resource (in served's order) whose request is evaluated at the resource
// itself (direct: the rules name it), else the first the API server converts (converted). Both the
// ValidatingAdmissionPolicy audit and the MutatingAdmissionPolicy audit (internal/mutate) plan with it.
func PlanOperation(served []APIResource, op admission.Operation, f PlanFuncs) (direct, converted map[string]Plan) {
	direct, converted = map[string]Plan{}, map[string]Plan{}
	for _, r := range served {
		if f.Skip(r.Resource.GroupResource()) {
			continue
		}
		class := f.Class(r.Resource)
		if f.Done(class) {
			continue
		}
		read, ok := f.Matches(resourceAttributes(r, op), r)
		if !ok {
			continue
		}
		candidates := converted
		if read == r.Resource {
			candidates = direct
		}
		if _, taken := candidates[class]; !taken {
			candidates[class] = Plan{Request: r, Read: read}
		}
	}
	return direct, converted
}

// classKey identifies the class of resources equivalent to gvr.
func (p *Policy) classKey(gvr schema.GroupVersionResource) string {
	if p.deps.Resolver != nil {
		if eq := p.deps.Resolver.EquivalentResourcesFor(gvr, ""); len(eq) > 0 {
			return eq[0].GroupResource().String()
		}
	}
	return gvr.GroupResource().String()
}

// resourceLevel returns m without its object-level criteria: empty selectors, rules without resourceNames,
// and without the exclusions of named objects (they exclude some objects, not the resource).
func resourceLevel(m *admissionregistrationv1.MatchResources) *admissionregistrationv1.MatchResources {
	if m == nil {
		return nil
	}
	m = m.DeepCopy()
	m.NamespaceSelector = &metav1.LabelSelector{}
	m.ObjectSelector = &metav1.LabelSelector{}
	for i := range m.ResourceRules {
		m.ResourceRules[i].ResourceNames = nil
	}
	m.ExcludeResourceRules = slices.DeleteFunc(m.ExcludeResourceRules, func(r admissionregistrationv1.NamedRuleWithOperations) bool {
		return len(r.ResourceNames) > 0
	})
	return m
}

// resourceAttributes describes a request for some object of r, for resource-level matching.
func resourceAttributes(r APIResource, op admission.Operation) admission.Attributes {
	namespace := ""
	if r.Namespaced {
		namespace = metav1.NamespaceDefault
	}
	return admission.NewAttributesRecord(nil, nil, r.GroupVersionKind(), namespace, "", r.Resource, "", op,
		operationOptions(op), false, nil)
}

// operationOptions are the options the apiserver's handlers pass to admission, as a request without query
// parameters would set them.
func operationOptions(op admission.Operation) runtime.Object {
	gv := metav1.SchemeGroupVersion
	switch op {
	case admission.Create:
		return &metav1.CreateOptions{TypeMeta: metav1.TypeMeta{APIVersion: gv.String(), Kind: "CreateOptions"}}
	case admission.Update:
		return &metav1.UpdateOptions{TypeMeta: metav1.TypeMeta{APIVersion: gv.String(), Kind: "UpdateOptions"}}
	case admission.Delete:
		return &metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: gv.String(), Kind: "DeleteOptions"}}
	}
	return nil
}

// ParamScope tells whether a change to obj, an object of the policy's paramKind, can change the policy's
// results: all when a binding reads it for every object (by namespace and name, by a selector in a fixed
// namespace, or as a cluster-scoped param), namespaces when bindings read it only for objects in its own
// namespace (a paramRef without namespace on a namespaced kind). Callers check the object before and after a
// change, since a label change can move it in or out of a selector.
func (p *Policy) ParamScope(obj metav1.Object) (all bool, namespaces []string) {
	if p.compiled.paramKind == nil {
		return false, nil
	}
	for _, b := range p.bindings {
		ref := b.binding.Spec.ParamRef
		if ref == nil || !paramRefSelects(ref, obj) {
			continue
		}
		switch {
		case ref.Namespace != "":
			if ref.Namespace == obj.GetNamespace() {
				all = true
			}
		case obj.GetNamespace() == "":
			all = true
		default:
			if !slices.Contains(namespaces, obj.GetNamespace()) {
				namespaces = append(namespaces, obj.GetNamespace())
			}
		}
	}
	if all {
		return true, nil
	}
	return false, namespaces
}

// paramRefSelects reports whether ref picks obj by name or by selector, ignoring namespaces.
func paramRefSelects(ref *admissionregistrationv1.ParamRef, obj metav1.Object) bool {
	if ref.Name != "" {
		return ref.Name == obj.GetName()
	}
	if ref.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(ref.Selector)
	if err != nil {
		return true // an invalid selector fails every evaluation; any change may be the fix
	}
	return sel.Matches(labels.Set(obj.GetLabels()))
}

// Problems lists what in the policy does not compile (see Compiled.Problems).
func (p *Policy) Problems() []string { return p.compiled.Problems() }
