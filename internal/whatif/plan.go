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
	"github.com/celaudit/celaudit/internal/crdrules"
	"github.com/celaudit/celaudit/internal/engine"
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
	// Views read the live cluster's resources, namespaces and params.
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
}

// updateJudge decides the onUpdate property of the rejecting results of one object under a proposed policy.
type updateJudge interface {
	// onUpdate returns, for each result of failing (the results of obj under the proposed policy for which
	// Rejects holds),
	// OnUpdateRejected, OnUpdateRatcheted or OnUpdateAllowed; "" when it cannot be decided.
	onUpdate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, failing []audit.Result) []string
}

// Plan compiles every policy the proposal touches, today and under the proposal: the proposed CRDs,
// ValidatingAdmissionPolicies and AuditPolicies; the live policies whose bindings the proposal adds,
// replaces or switches (sw, which may be nil); and the live policies whose param kind the proposal holds
// objects of. Under the proposal, policies read namespaces and params through the live views overlaid with
// the proposed objects, and are bound to the live bindings with the proposed ones in place of those of the
// same name. A proposal naming something that exists neither in it nor in the cluster is an *InputError.
// Pairs are sorted by key.
func Plan(c engine.Compiler, live Live, p *Proposal, sw *Switch) ([]*Pair, error) {
	namespaces, err := views.NewOverlayNamespaces(live.Views.Namespaces, p.Objects)
	if err != nil {
		return nil, &InputError{Problems: []string{err.Error()}}
	}
	proposedViews := engine.Views{
		Resources:  live.Views.Resources,
		Namespaces: namespaces,
		Params:     views.NewOverlayParams(live.Views.Params, p.Objects),
	}
	var problems []string
	bindings, affected, err := proposedBindings(live.Bindings, p, sw)
	if err != nil {
		problems = append(problems, err.Error())
	}
	paramKinds := map[schema.GroupVersionKind]bool{}
	for _, o := range p.Objects {
		paramKinds[o.GroupVersionKind()] = true
	}

	var pairs []*Pair
	for _, crd := range p.CRDs {
		proposed := crdrules.Compile(crd, c.CRDOptions)
		pair := &Pair{Key: proposed.Key(), Proposed: proposed, update: crdJudge{policy: proposed}, crd: crdRevision{proposed: crd}}
		if old, ok := live.CRDs[crd.Name]; ok {
			pair.Today, pair.crd.live = c.CRD(old), old
		}
		pairs = append(pairs, pair)
	}

	liveVAPs := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	for _, v := range live.VAPs {
		liveVAPs[v.Name] = v
		// The pairs celaudit registers for AuditPolicies are compared as the AuditPolicies that own them.
		if auditpolicy.OwnerAmong(v, live.AuditPolicies) == nil && usesParams(v.Spec.ParamKind, paramKinds) {
			affected[v.Name] = true
		}
	}
	proposedVAPs := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	for _, v := range p.VAPs {
		proposedVAPs[v.Name] = v
		affected[v.Name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(affected)) {
		today, proposed := liveVAPs[name], proposedVAPs[name]
		if proposed == nil {
			proposed = today
		}
		if proposed == nil {
			problems = append(problems, fmt.Sprintf("ValidatingAdmissionPolicy %s, which a binding names, is neither in the files nor in the cluster", name))
			continue
		}
		pair := &Pair{
			Key:      audit.VAPKey(name),
			Proposed: engine.Bind(c.VAP(proposed), bindings, proposedViews),
			update:   newVAPJudge(c, audit.VAPKey(name), proposed, bindings, proposedViews),
		}
		if today != nil {
			pair.Today = engine.Bind(c.VAP(today), live.Bindings, live.Views)
		}
		pairs = append(pairs, pair)
	}

	liveAPs := map[string]*v1alpha1.AuditPolicy{}
	for _, ap := range live.AuditPolicies {
		liveAPs[ap.Name] = ap
	}
	proposedAPs := map[string]*v1alpha1.AuditPolicy{}
	for _, ap := range p.AuditPolicies {
		proposedAPs[ap.Name] = ap
	}
	for _, ap := range live.AuditPolicies {
		if _, ok := proposedAPs[ap.Name]; !ok && usesParams(ap.Spec.ParamKind, paramKinds) {
			proposedAPs[ap.Name] = ap
		}
	}
	for _, name := range slices.Sorted(maps.Keys(proposedAPs)) {
		proposed := proposedAPs[name]
		compiled, binding := c.AuditPolicy(proposed)
		a := auditpolicy.ToAdmission(proposed, c.Exemptions)
		pair := &Pair{
			Key:      audit.AuditPolicyKey(name),
			Proposed: engine.Bind(compiled, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding}, proposedViews),
			update:   newVAPJudge(c, audit.AuditPolicyKey(name), a.Policy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{a.Binding}, proposedViews),
		}
		if today, ok := liveAPs[name]; ok {
			compiled, binding := c.AuditPolicy(today)
			pair.Today = engine.Bind(compiled, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding}, live.Views)
		}
		pairs = append(pairs, pair)
	}
	if problems = append(problems, p.compileProblems(c)...); len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	slices.SortFunc(pairs, func(a, b *Pair) int { return a.Key.Compare(b.Key) })
	return pairs, nil
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
