package whatif

import (
	"context"
	"fmt"
	"maps"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/mutate"
)

// Mutation is one stored object as the proposed MutatingAdmissionPolicies would leave it on its next write
// (Options.Mutations keeps them).
type Mutation struct {
	// Resource is the resource the object was read at.
	Resource schema.GroupVersionResource
	// Object is the stored object; a Secret's values are replaced by audit.RedactionMarker (see
	// mutate.RedactedSecret), as they are in Patch.
	Object *unstructured.Unstructured
	// Operation is the request the object is judged as (UPDATE or CREATE).
	Operation string
	// Patch turns Object into the object as the whole proposed chain leaves it (mutate.Outcome.Patch).
	Patch []mutate.Operation
}

// mapPairs pairs the MutatingAdmissionPolicies the proposal holds, whose bindings it adds or replaces, or whose
// params it holds objects of, as they are in today's chain and as they would be in the proposed one. A chain
// is bound as a whole (a policy's result depends on the policies before it): today's is the cluster's policies
// and bindings with the live CRDs, the proposed one has the proposed policies, bindings and CRDs in place of
// those of the same name. A proposed policy that no binding binds is paired with a policy that covers nothing,
// and noted: the API server would not apply it.
func (pl *planner) mapPairs() []*Pair {
	p, live := pl.proposal, pl.live
	affected := map[string]bool{}
	for _, m := range p.MAPs {
		affected[m.Name] = true
	}
	liveBindings := map[string]*admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	for _, b := range live.MAPBindings {
		liveBindings[b.Name] = b
	}
	for _, b := range p.MAPBindings {
		affected[b.Spec.PolicyName] = true
		if old, ok := liveBindings[b.Name]; ok {
			affected[old.Spec.PolicyName] = true // it may lose the binding
		}
	}
	for _, m := range live.MAPs {
		if usesParams(m.Spec.ParamKind, pl.paramKinds) {
			affected[m.Name] = true
		}
	}
	if len(affected) == 0 {
		return nil
	}

	proposedMAPs := overlay(live.MAPs, p.MAPs, func(m *admissionregistrationv1.MutatingAdmissionPolicy) string { return m.Name })
	proposedBindings := overlay(live.MAPBindings, p.MAPBindings, func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) string { return b.Name })
	proposedViews := pl.views
	proposedViews.CRDs = overlay(live.Views.CRDs, p.CRDs, func(c *apiextensionsv1.CustomResourceDefinition) string { return c.Name })
	today := byKey(pl.compiler.BindMAPs(pl.compileMAPs(live.MAPs), live.MAPBindings, live.Views))
	proposed := byKey(pl.compiler.BindMAPs(pl.compileMAPs(proposedMAPs), proposedBindings, proposedViews))

	exists := map[string]bool{}
	for _, m := range proposedMAPs {
		exists[m.Name] = true
	}
	var pairs []*Pair
	for _, name := range slices.Sorted(maps.Keys(affected)) {
		key := audit.MAPKey(name)
		if !exists[name] {
			pl.problems = append(pl.problems, fmt.Sprintf("MutatingAdmissionPolicy %s, which a binding names, is neither in the files nor in the cluster", name))
			continue
		}
		pair := &Pair{Key: key, Today: today[key], Proposed: proposed[key]}
		if pair.Proposed == nil {
			pair.Proposed = unbound{key: key}
			pair.note = fmt.Sprintf("MutatingAdmissionPolicy %s has no MutatingAdmissionPolicyBinding in the files or the cluster: "+
				"the API server does not apply it", name)
		}
		pairs = append(pairs, pair)
	}
	return pairs
}

// compileMAPs compiles each policy object once, whichever chains it is bound in.
func (pl *planner) compileMAPs(policies []*admissionregistrationv1.MutatingAdmissionPolicy) []*mutate.Compiled {
	out := make([]*mutate.Compiled, len(policies))
	for i, m := range policies {
		if _, ok := pl.maps[m]; !ok {
			pl.maps[m] = pl.compiler.MAP(m)
		}
		out[i] = pl.maps[m]
	}
	return out
}

// overlay returns base with the elements of extra in place of those of the same name, and extra's others
// added, sorted by name.
func overlay[T any](base, extra []T, name func(T) string) []T {
	byName := map[string]T{}
	for _, v := range base {
		byName[name(v)] = v
	}
	for _, v := range extra {
		byName[name(v)] = v
	}
	out := make([]T, 0, len(byName))
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, byName[n])
	}
	return out
}

func byKey(policies []audit.Policy) map[audit.PolicyKey]audit.Policy {
	out := make(map[audit.PolicyKey]audit.Policy, len(policies))
	for _, p := range policies {
		out[p.Key()] = p
	}
	return out
}

// unbound is a policy the API server does not apply: it covers nothing.
type unbound struct{ key audit.PolicyKey }

var _ audit.Policy = unbound{}

func (u unbound) Key() audit.PolicyKey                   { return u.key }
func (unbound) Resources() []schema.GroupVersionResource { return nil }
func (unbound) Evaluate(context.Context, schema.GroupVersionResource, *unstructured.Unstructured) []audit.Result {
	return nil
}

// mutationOf returns what the proposed chain makes of the object, when a proposed MutatingAdmissionPolicy
// covers it and the chain would change it.
func mutationOf(ctx context.Context, o engine.Object, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, covs []coverage) (Mutation, bool) {
	for _, c := range covs {
		if !c.proposed || c.pair.Key.Source != audit.SourceMAP {
			continue
		}
		out, ok := o.Mutation(ctx, c.pair.Proposed)
		if !ok || len(out.Patch) == 0 {
			return Mutation{}, false
		}
		stored := obj
		if gvr.Group == "" && gvr.Resource == "secrets" {
			stored = &unstructured.Unstructured{Object: mutate.RedactedSecret(obj.Object)}
		}
		return Mutation{Resource: gvr, Object: stored, Operation: string(out.Operation), Patch: out.Patch}, true
	}
	return Mutation{}, false
}
