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

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/auditpolicy"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
)

// Live is what a proposal is compared with: the live cluster's policy objects and views.
type Live struct {
	// CRDs holds the live CustomResourceDefinitions the proposal names, by name.
	CRDs map[string]*apiextensionsv1.CustomResourceDefinition
	// VAPs, Bindings and AuditPolicies hold every live object of their kind.
	VAPs          []*admissionregistrationv1.ValidatingAdmissionPolicy
	Bindings      []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	AuditPolicies []*v1alpha1.AuditPolicy
	// MAPs and MAPBindings hold every live MutatingAdmissionPolicy and binding: the chain of today.
	MAPs        []*admissionregistrationv1.MutatingAdmissionPolicy
	MAPBindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	// Views read the live cluster's resources, namespaces and params; Views.CRDs holds every live CRD when
	// the proposal holds MutatingAdmissionPolicies or their bindings (their changes are merged with the
	// schemas).
	Views engine.Views
}

// Switch is a live binding switched to other validationActions (kubectl celaudit whatif --binding --actions).
type Switch struct {
	Binding string
	Actions []admissionregistrationv1.ValidationAction
}

// Pair is one policy as it is today and as it would be under the proposal.
type Pair struct {
	Key audit.PolicyKey
	// Today is nil when the cluster has no such policy yet.
	Today audit.Policy
	// Proposed is the policy once the proposal is applied.
	Proposed audit.Policy
	// update says what the API server does with an UPDATE of an object failing Proposed.
	update updateJudge
	// crd is the proposed CRD and the live one, for the pair of a proposed CRD: the versions its objects
	// can be read in.
	crd crdRevision
	// note is told in Outcome.Notes: what the results cannot show.
	note string
}

// updateJudge decides the onUpdate property of the rejecting results of one object under a proposed policy.
type updateJudge interface {
	// onUpdate returns, for each result of failing (the results of obj under the proposed policy for which
	// Rejects holds),
	// OnUpdateRejected, OnUpdateRatcheted or OnUpdateAllowed; "" when it cannot be decided.
	onUpdate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, failing []audit.Result) []string
}

// Compiler compiles the policy objects of a proposal and of the cluster. engine.Compiler, the compiler of
// every front end, implements it.
type Compiler interface {
	CRD(crd *apiextensionsv1.CustomResourceDefinition) audit.Policy
	VAP(policy *admissionregistrationv1.ValidatingAdmissionPolicy) *vap.Compiled
	AuditPolicy(ap *v1alpha1.AuditPolicy) (*vap.Compiled, *admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	MAP(policy *admissionregistrationv1.MutatingAdmissionPolicy) *mutate.Compiled
	BindMAPs(compiled []*mutate.Compiled, bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding, views engine.Views) []audit.Policy
}

var _ Compiler = engine.Compiler{}

// Plan compiles every policy the proposal touches, today and under the proposal: the proposed CRDs,
// ValidatingAdmissionPolicies, AuditPolicies and MutatingAdmissionPolicies (see mapPairs); the live policies
// whose bindings the proposal adds,
// replaces or switches (sw, which may be nil); and the live policies whose param kind the proposal holds
// objects of. Under the proposal, policies read namespaces and params through the live views overlaid with
// the proposed objects, and are bound to the live bindings with the proposed ones in place of those of the
// same name. A proposal naming something that exists neither in it nor in the cluster, or whose expressions
// do not compile, is an *InputError. Pairs are sorted by key.
//
// Each policy object is compiled once (compiling is most of the CPU a run over a few thousand objects
// takes): today's and the proposed policy share the compilation when the object is the same, and the
// onUpdate judge and the compile check use the pair's.
func Plan(c Compiler, live Live, p *Proposal, sw *Switch) ([]*Pair, error) {
	pl, err := newPlanner(c, live, p, sw)
	if err != nil {
		return nil, err
	}
	pairs := pl.crdPairs()
	pairs = append(pairs, pl.vapPairs()...)
	pairs = append(pairs, pl.auditPolicyPairs()...)
	pairs = append(pairs, pl.mapPairs()...)
	if problems := append(pl.problems, pl.compileProblems()...); len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	slices.SortFunc(pairs, func(a, b *Pair) int { return a.Key.Compare(b.Key) })
	return pairs, nil
}

// planner is what Plan pairs policies with: the proposal, the cluster, the views and bindings once the
// proposal is applied, and each policy object's compilation.
type planner struct {
	compiler Compiler
	live     Live
	proposal *Proposal
	// views are the live views overlaid with the proposed namespaces and params.
	views engine.Views
	// bindings are the live bindings with the proposed ones in place of those of the same name, and the
	// switch applied; affected names the ValidatingAdmissionPolicies whose bindings that changes.
	bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	affected map[string]bool
	// paramKinds are the kinds of the proposed objects other than policies.
	paramKinds map[schema.GroupVersionKind]bool
	problems   []string

	crds          map[*apiextensionsv1.CustomResourceDefinition]audit.Policy
	vaps          map[*admissionregistrationv1.ValidatingAdmissionPolicy]*vap.Compiled
	auditPolicies map[*v1alpha1.AuditPolicy]compiledAuditPolicy
	maps          map[*admissionregistrationv1.MutatingAdmissionPolicy]*mutate.Compiled
}

// compiledAuditPolicy is an AuditPolicy compiled as the ValidatingAdmissionPolicy it stands for, with the
// binding it is bound to.
type compiledAuditPolicy struct {
	compiled *vap.Compiled
	binding  *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

func newPlanner(c Compiler, live Live, p *Proposal, sw *Switch) (*planner, error) {
	namespaces, err := views.NewOverlayNamespaces(live.Views.Namespaces, p.Objects)
	if err != nil {
		return nil, &InputError{Problems: []string{err.Error()}}
	}
	pl := &planner{
		compiler: c,
		live:     live,
		proposal: p,
		views: engine.Views{
			Resources:  live.Views.Resources,
			Namespaces: namespaces,
			Params:     views.NewOverlayParams(live.Views.Params, p.Objects),
		},
		paramKinds:    map[schema.GroupVersionKind]bool{},
		crds:          map[*apiextensionsv1.CustomResourceDefinition]audit.Policy{},
		vaps:          map[*admissionregistrationv1.ValidatingAdmissionPolicy]*vap.Compiled{},
		auditPolicies: map[*v1alpha1.AuditPolicy]compiledAuditPolicy{},
		maps:          map[*admissionregistrationv1.MutatingAdmissionPolicy]*mutate.Compiled{},
	}
	if pl.bindings, pl.affected, err = proposedBindings(live.Bindings, p, sw); err != nil {
		pl.problems = append(pl.problems, err.Error())
	}
	for _, o := range p.Objects {
		pl.paramKinds[o.GroupVersionKind()] = true
	}
	return pl, nil
}

// crd, vap and auditPolicy compile a policy object the first time they are asked for it.
func (pl *planner) crd(crd *apiextensionsv1.CustomResourceDefinition) audit.Policy {
	if _, ok := pl.crds[crd]; !ok {
		pl.crds[crd] = pl.compiler.CRD(crd)
	}
	return pl.crds[crd]
}

func (pl *planner) vap(policy *admissionregistrationv1.ValidatingAdmissionPolicy) *vap.Compiled {
	if _, ok := pl.vaps[policy]; !ok {
		pl.vaps[policy] = pl.compiler.VAP(policy)
	}
	return pl.vaps[policy]
}

func (pl *planner) auditPolicy(ap *v1alpha1.AuditPolicy) compiledAuditPolicy {
	if _, ok := pl.auditPolicies[ap]; !ok {
		compiled, binding := pl.compiler.AuditPolicy(ap)
		pl.auditPolicies[ap] = compiledAuditPolicy{compiled: compiled, binding: binding}
	}
	return pl.auditPolicies[ap]
}

// crdPairs pairs each proposed CRD with the live one of its name, if any.
func (pl *planner) crdPairs() []*Pair {
	pairs := make([]*Pair, 0, len(pl.proposal.CRDs))
	for _, crd := range pl.proposal.CRDs {
		proposed := pl.crd(crd)
		pair := &Pair{Key: proposed.Key(), Proposed: proposed, crd: crdRevision{proposed: crd}}
		if v, ok := proposed.(updateValidator); ok {
			pair.update = crdJudge{policy: v}
		}
		if old, ok := pl.live.CRDs[crd.Name]; ok {
			pair.Today, pair.crd.live = pl.crd(old), old
		}
		pairs = append(pairs, pair)
	}
	return pairs
}

// vapPairs pairs the ValidatingAdmissionPolicies the proposal holds, or whose bindings or params it
// changes, as they are and as they would be.
func (pl *planner) vapPairs() []*Pair {
	affected := maps.Clone(pl.affected)
	liveVAPs := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	for _, v := range pl.live.VAPs {
		liveVAPs[v.Name] = v
		// The pairs celaudit registers for AuditPolicies are compared as the AuditPolicies that own them.
		if auditpolicy.OwnerAmong(v, pl.live.AuditPolicies) == nil && usesParams(v.Spec.ParamKind, pl.paramKinds) {
			affected[v.Name] = true
		}
	}
	proposedVAPs := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	for _, v := range pl.proposal.VAPs {
		proposedVAPs[v.Name] = v
		affected[v.Name] = true
	}
	var pairs []*Pair
	for _, name := range slices.Sorted(maps.Keys(affected)) {
		today, proposed := liveVAPs[name], proposedVAPs[name]
		if proposed == nil {
			proposed = today
		}
		if proposed == nil {
			pl.problems = append(pl.problems, fmt.Sprintf("ValidatingAdmissionPolicy %s, which a binding names, is neither in the files nor in the cluster", name))
			continue
		}
		compiled := pl.vap(proposed)
		pair := &Pair{
			Key:      audit.VAPKey(name),
			Proposed: engine.Bind(compiled, pl.bindings, pl.views),
			update:   newVAPJudge(compiled, name, pl.bindings, pl.views),
		}
		if today != nil {
			pair.Today = engine.Bind(pl.vap(today), pl.live.Bindings, pl.live.Views)
		}
		pairs = append(pairs, pair)
	}
	return pairs
}

// auditPolicyPairs pairs the AuditPolicies the proposal holds, or whose params it changes, as they are and
// as they would be.
func (pl *planner) auditPolicyPairs() []*Pair {
	liveAPs := map[string]*v1alpha1.AuditPolicy{}
	for _, ap := range pl.live.AuditPolicies {
		liveAPs[ap.Name] = ap
	}
	proposedAPs := map[string]*v1alpha1.AuditPolicy{}
	for _, ap := range pl.proposal.AuditPolicies {
		proposedAPs[ap.Name] = ap
	}
	for _, ap := range pl.live.AuditPolicies {
		if _, ok := proposedAPs[ap.Name]; !ok && usesParams(ap.Spec.ParamKind, pl.paramKinds) {
			proposedAPs[ap.Name] = ap
		}
	}
	pairs := make([]*Pair, 0, len(proposedAPs))
	for _, name := range slices.Sorted(maps.Keys(proposedAPs)) {
		proposed := pl.auditPolicy(proposedAPs[name])
		bindings := []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{proposed.binding}
		pair := &Pair{
			Key:      audit.AuditPolicyKey(name),
			Proposed: engine.Bind(proposed.compiled, bindings, pl.views),
			update:   newVAPJudge(proposed.compiled, proposed.binding.Spec.PolicyName, bindings, pl.views),
		}
		if ap, ok := liveAPs[name]; ok {
			today := pl.auditPolicy(ap)
			pair.Today = engine.Bind(today.compiled, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{today.binding}, pl.live.Views)
		}
		pairs = append(pairs, pair)
	}
	return pairs
}

// compileProblems lists, with their sources, the expressions of the proposed policies that do not compile,
// with the compiler's messages: the API server would reject such a policy or CRD.
func (pl *planner) compileProblems() []string {
	p := pl.proposal
	var out []string
	add := func(kind, name string, problems []string) {
		for _, problem := range problems {
			out = append(out, fmt.Sprintf("%s: %s %s: %s", p.source(kind, name), kind, name, problem))
		}
	}
	for _, crd := range p.CRDs {
		if c, ok := pl.crd(crd).(interface{ Problems() []string }); ok {
			add("CustomResourceDefinition", crd.Name, c.Problems())
		}
	}
	for _, v := range p.VAPs {
		add("ValidatingAdmissionPolicy", v.Name, pl.vap(v).Problems())
	}
	for _, ap := range p.AuditPolicies {
		add("AuditPolicy", ap.Name, pl.auditPolicy(ap).compiled.Problems())
	}
	return out
}

// proposedBindings returns the bindings once the proposal is applied (the live ones, with the proposed ones
// in place of those of the same name, and sw applied), and the names of the policies whose bindings change.
func proposedBindings(live []*admissionregistrationv1.ValidatingAdmissionPolicyBinding, p *Proposal, sw *Switch) ([]*admissionregistrationv1.ValidatingAdmissionPolicyBinding, map[string]bool, error) {
	byName := map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, b := range live {
		byName[b.Name] = b
	}
	affected := map[string]bool{}
	for _, b := range p.Bindings {
		if old, ok := byName[b.Name]; ok {
			affected[old.Spec.PolicyName] = true // it may lose the binding
		}
		byName[b.Name] = b
		affected[b.Spec.PolicyName] = true
	}
	var err error
	if sw != nil {
		b, ok := byName[sw.Binding]
		if !ok {
			err = fmt.Errorf("--binding %s: no ValidatingAdmissionPolicyBinding of that name in the cluster or the files", sw.Binding)
		} else {
			b = b.DeepCopy()
			b.Spec.ValidationActions = slices.Clone(sw.Actions)
			byName[b.Name] = b
			affected[b.Spec.PolicyName] = true
		}
	}
	out := make([]*admissionregistrationv1.ValidatingAdmissionPolicyBinding, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, byName[name])
	}
	return out, affected, err
}

// usesParams reports whether a policy with paramKind reads objects of one of kinds.
func usesParams(paramKind *admissionregistrationv1.ParamKind, kinds map[schema.GroupVersionKind]bool) bool {
	if paramKind == nil {
		return false
	}
	return kinds[schema.FromAPIVersionAndKind(paramKind.APIVersion, paramKind.Kind)]
}
