package mutate

import (
	"context"
	"maps"
	"math"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/vap"
)

// DefaultCategory is the category of the results of a MutatingAdmissionPolicy without the category
// annotation.
const DefaultCategory = "MutatingAdmissionPolicy"

// RuleMutations is the rule of every result of a MutatingAdmissionPolicy: one result per (policy, object)
// covers all of the policy's mutations, as the API server applies them together.
const RuleMutations = "mutations"

// Properties of the results of a MutatingAdmissionPolicy, besides audit.PropOperation (the request the
// object is judged as: UPDATE or CREATE) and audit.PropFailurePolicy.
const (
	// PropFields lists the fields the policy would change, comma-separated, in patch order.
	PropFields = "fields"
	// PropPatch is the RFC 6902 JSON patch of the policy's change, cut to MaxPatchBytes.
	PropPatch = "patch"
	// PropPatchTruncated is "true" when PropPatch was cut; kubectl celaudit whatif prints the whole patch.
	PropPatchTruncated = "patchTruncated"
)

// Defaults are the category and severity of the results of policies without the celaudit annotations.
type Defaults struct {
	// Category when the policy has no category annotation; DefaultCategory when empty.
	Category string
	// Severity when the policy has no valid severity annotation; audit.SeverityMedium when empty.
	Severity string
	// FullPatch puts the whole patch of a policy's change in PropPatch, never cut (PropPatchTruncated is then
	// never set): for output that is not a report of bounded size, such as kubectl celaudit whatif -o yaml.
	FullPatch bool
	// Create judges every object as the CREATE of a new object (see Set.EvaluateCreate) rather than as the next
	// write of a stored one: kubectl celaudit check judges manifests about to be applied so.
	Create bool
}

// Policy is one MutatingAdmissionPolicy of a Set as an audit.Policy: its result on an object is read from the
// evaluation of the whole Set on it (the chain the API server runs), which the policies evaluated on one
// object share through the context's audit.ObjectCache. Build every Policy of a Set again when any policy,
// binding, the served resources or the CRDs change: one policy's change can change what the next one does.
type Policy struct {
	set       *Set
	key       audit.PolicyKey
	resources []schema.GroupVersionResource
	category  string
	severity  string
	fullPatch bool
	create    bool
}

var (
	_ audit.Policy     = &Policy{}
	_ audit.Classified = &Policy{}
)

// Policies returns one Policy per policy the Set applies, in evaluation order. A policy without bindings, or
// whose paramKind does not parse, is not applied by the API server and has none.
func (s *Set) Policies(defaults Defaults) []*Policy {
	defaultSeverity, ok := audit.ParseSeverity(defaults.Severity)
	if !ok {
		defaultSeverity = audit.SeverityMedium
	}
	defaultCategory := defaults.Category
	if defaultCategory == "" {
		defaultCategory = DefaultCategory
	}
	out := make([]*Policy, 0, len(s.hooks))
	for _, h := range s.hooks {
		ann := audit.ParseAnnotations(h.Policy.Annotations)
		out = append(out, &Policy{
			set:       s,
			key:       audit.MAPKey(h.Policy.Name),
			resources: s.resources(h, defaults.Create),
			category:  ann.CategoryOr(defaultCategory),
			severity:  ann.SeverityOr(defaultSeverity),
			fullPatch: defaults.FullPatch,
			create:    defaults.Create,
		})
	}
	return out
}

// Key implements audit.Policy.
func (p *Policy) Key() audit.PolicyKey { return p.key }

// Resources implements audit.Policy: for each class of equivalent served resources that the policy and one
// of its bindings match for an UPDATE or a CREATE (selectors and resourceNames aside: they are decided per
// object), the version to read objects in — the one the policy's rules name, else the first served.
func (p *Policy) Resources() []schema.GroupVersionResource { return slices.Clone(p.resources) }

// Category implements audit.Classified.
func (p *Policy) Category() string { return p.category }

// Severity implements audit.Classified.
func (p *Policy) Severity() string { return p.severity }

// Evaluate implements audit.Policy: the policy's result in the Set's evaluation of obj (see Set.Evaluate),
// none when the policy does not apply to the request the object is judged as.
func (p *Policy) Evaluate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	out := p.Outcome(ctx, gvr, obj)
	for _, r := range out.Results {
		if r.Policy == p.key.Name {
			return []audit.Result{p.result(r, obj)}
		}
	}
	return nil
}

// Outcome returns the evaluation of the whole Set on obj that the policy's result is read from (computed
// once per object evaluation, see audit.ObjectCache): Outcome.Patch turns obj into the object as every
// policy of the Set leaves it, which kubectl celaudit shows (whatif --diff, check --mutate).
func (p *Policy) Outcome(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) Outcome {
	return p.set.shared(ctx, gvr, obj, p.create)
}

func (p *Policy) result(r Result, obj *unstructured.Unstructured) audit.Result {
	props := map[string]string{
		audit.PropOperation:     string(r.Operation),
		audit.PropFailurePolicy: string(r.FailurePolicy),
	}
	if len(r.Fields) > 0 {
		props[PropFields] = strings.Join(r.Fields, ",")
	}
	switch {
	case p.fullPatch && len(r.FullPatch) > 0:
		if full, _, err := BoundedPatch(r.FullPatch, math.MaxInt); err == nil {
			props[PropPatch] = full
		}
	case r.Patch != "":
		props[PropPatch] = r.Patch
		if r.PatchTruncated {
			props[PropPatchTruncated] = "true"
		}
	}
	return audit.Result{
		Policy:       p.key.Name,
		PolicySource: audit.SourceMAP,
		Rule:         RuleMutations,
		Category:     p.category,
		Severity:     p.severity,
		Verdict:      r.Verdict,
		Message:      r.Message,
		Properties:   props,
		Resource:     audit.RefOf(obj),
	}
}

// sharedKey identifies one Set's evaluation of an object read at a resource in an audit.ObjectCache.
type sharedKey struct {
	set    *Set
	gvr    schema.GroupVersionResource
	create bool
}

// shared returns the Set's evaluation of obj, computed once per object evaluation (see audit.ObjectCache).
func (s *Set) shared(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, create bool) Outcome {
	return audit.ObjectCacheFrom(ctx).Get(sharedKey{set: s, gvr: gvr, create: create}, func() any {
		return s.evaluate(ctx, gvr, obj, create)
	}).(Outcome)
}

// resources plans which resources h's objects are read at, as the ValidatingAdmissionPolicy audit plans them
// (vap.Policy.Resources): per class of equivalent served resources, UPDATE first, then CREATE (the requests a
// stored object is judged as), the resource the policy's rules name directly, else the one the API server
// converts to. Resources that cannot be both listed and watched, the admission policy kinds and celaudit's
// own reports (unless a rule names them) are left out. With create, only CREATE is planned (see Defaults.Create).
func (s *Set) resources(h mutating.PolicyHook, create bool) []schema.GroupVersionResource {
	if s.deps.Resolver == nil || h.Policy.Spec.MatchConstraints == nil {
		return nil
	}
	served := s.deps.Resolver.ServedResources()
	readable := map[schema.GroupVersionResource]bool{}
	for _, r := range served {
		readable[r.Resource] = r.Auditable
	}
	definition := h.Policy.DeepCopy()
	definition.Spec.MatchConstraints = vap.ResourceLevel(definition.Spec.MatchConstraints)
	definitionAccessor := mutating.NewMutatingAdmissionPolicyAccessor(definition)
	constraints := []*admissionregistrationv1.MatchResources{h.Policy.Spec.MatchConstraints}
	bindings := make([]generic.BindingAccessor, 0, len(h.Bindings))
	for _, b := range h.Bindings {
		constraints = append(constraints, b.Spec.MatchResources)
		b = b.DeepCopy()
		b.Spec.MatchResources = vap.ResourceLevel(b.Spec.MatchResources)
		bindings = append(bindings, mutating.NewMutatingAdmissionPolicyBindingAccessor(b))
	}
	reports := vap.NamesReports(constraints...)

	planned := map[string]vap.Plan{}
	funcs := vap.PlanFuncs{
		Class: s.classKey,
		Done:  func(class string) bool { _, done := planned[class]; return done },
		Skip:  func(gr schema.GroupResource) bool { return exempt(gr) || vap.ReportResource(gr) && !reports },
		Matches: func(attrs admission.Attributes, r vap.APIResource) (schema.GroupVersionResource, bool) {
			o := s.types.objectInterfaces(r.GroupVersionKind(), s.deps.Resolver)
			matches, read, _, err := s.matcher.DefinitionMatches(attrs, o, definitionAccessor)
			return read, err == nil && matches && readable[read] && bound(s.matcher, attrs, o, bindings)
		},
	}
	for _, op := range operations(create) {
		direct, converted := vap.PlanOperation(served, op, funcs)
		maps.Copy(planned, converted)
		maps.Copy(planned, direct)
	}
	reads := map[schema.GroupVersionResource]bool{}
	for _, pl := range planned {
		reads[pl.Read] = true
	}
	var out []schema.GroupVersionResource
	for _, r := range served {
		if reads[r.Resource] {
			out = append(out, r.Resource)
			delete(reads, r.Resource)
		}
	}
	return out
}

// bound reports whether one of bindings matches the request.
func bound(matcher generic.PolicyMatcher, attrs admission.Attributes, o admission.ObjectInterfaces, bindings []generic.BindingAccessor) bool {
	for _, b := range bindings {
		if ok, err := matcher.BindingMatches(attrs, o, b); err == nil && ok {
			return true
		}
	}
	return false
}

// classKey identifies the class of resources equivalent to gvr.
func (s *Set) classKey(gvr schema.GroupVersionResource) string {
	if eq := s.deps.Resolver.EquivalentResourcesFor(gvr, ""); len(eq) > 0 {
		return eq[0].GroupResource().String()
	}
	return gvr.GroupResource().String()
}
