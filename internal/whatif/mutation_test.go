package whatif

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
)

func testMAP(name string) *admissionregistrationv1.MutatingAdmissionPolicy {
	never := admissionregistrationv1.NeverReinvocationPolicy
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			ReinvocationPolicy: never,
			Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: `Object{metadata: Object.metadata{labels: {"a": "b"}}}`}}},
		},
	}
}

func testMAPBinding(name, policy string) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy},
	}
}

// TestPlanMutatingPolicies checks which MutatingAdmissionPolicies a proposal pairs, and how: with today's policy
// when today's chain applies it, with a policy that covers nothing (and a note) when no binding binds it.
func TestPlanMutatingPolicies(t *testing.T) {
	// side describes a pair's policies: whether it has one today, and whether the proposed one is bound.
	type side struct{ today, bound bool }
	cases := []struct {
		name      string
		live      Live
		proposal  Proposal
		want      map[string]side
		wantNotes []string
		wantErr   string
	}{{
		name: "a new policy with its binding: the live chain's others are not paired",
		live: Live{MAPs: []*admissionregistrationv1.MutatingAdmissionPolicy{testMAP("a")},
			MAPBindings: []*admissionregistrationv1.MutatingAdmissionPolicyBinding{testMAPBinding("a", "a")}},
		proposal: Proposal{MAPs: []*admissionregistrationv1.MutatingAdmissionPolicy{testMAP("b")},
			MAPBindings: []*admissionregistrationv1.MutatingAdmissionPolicyBinding{testMAPBinding("b", "b")}},
		want: map[string]side{"b": {today: false, bound: true}},
	}, {
		name: "a changed policy bound in the cluster",
		live: Live{MAPs: []*admissionregistrationv1.MutatingAdmissionPolicy{testMAP("a")},
			MAPBindings: []*admissionregistrationv1.MutatingAdmissionPolicyBinding{testMAPBinding("a", "a")}},
		proposal: Proposal{MAPs: []*admissionregistrationv1.MutatingAdmissionPolicy{testMAP("a")}},
		want:     map[string]side{"a": {today: true, bound: true}},
	}, {
		name:     "a binding for a live policy that none binds today",
		live:     Live{MAPs: []*admissionregistrationv1.MutatingAdmissionPolicy{testMAP("c")}},
		proposal: Proposal{MAPBindings: []*admissionregistrationv1.MutatingAdmissionPolicyBinding{testMAPBinding("c", "c")}},
		want:     map[string]side{"c": {today: false, bound: true}},
	}, {
		name: "a live binding rebound to another policy: both change",
		live: Live{MAPs: []*admissionregistrationv1.MutatingAdmissionPolicy{testMAP("e"), testMAP("f")},
			MAPBindings: []*admissionregistrationv1.MutatingAdmissionPolicyBinding{testMAPBinding("shared", "e")}},
		proposal:  Proposal{MAPBindings: []*admissionregistrationv1.MutatingAdmissionPolicyBinding{testMAPBinding("shared", "f")}},
		want:      map[string]side{"e": {today: true, bound: false}, "f": {today: false, bound: true}},
		wantNotes: []string{"MutatingAdmissionPolicy e has no MutatingAdmissionPolicyBinding in the files or the cluster: the API server does not apply it"},
	}, {
		name:      "a policy without binding",
		proposal:  Proposal{MAPs: []*admissionregistrationv1.MutatingAdmissionPolicy{testMAP("d")}},
		want:      map[string]side{"d": {today: false, bound: false}},
		wantNotes: []string{"MutatingAdmissionPolicy d has no MutatingAdmissionPolicyBinding in the files or the cluster: the API server does not apply it"},
	}, {
		name:     "a binding for a policy nowhere",
		proposal: Proposal{MAPBindings: []*admissionregistrationv1.MutatingAdmissionPolicyBinding{testMAPBinding("g", "ghost")}},
		wantErr:  "MutatingAdmissionPolicy ghost, which a binding names, is neither in the files nor in the cluster",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.live.Views = engine.Views{Namespaces: anyNamespace{}}
			pairs, err := Plan(engine.Compiler{}, c.live, &c.proposal, nil)
			if c.wantErr != "" {
				var input *InputError
				if !errors.As(err, &input) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want an InputError with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]side{}
			var notes []string
			for _, p := range pairs {
				if p.Key.Source != audit.SourceMAP || p.Proposed.Key() != p.Key || p.Today != nil && p.Today.Key() != p.Key {
					t.Errorf("pair %v: today %v, proposed %v", p.Key, p.Today, p.Proposed)
				}
				_, unboundPolicy := p.Proposed.(unbound)
				got[p.Key.Name] = side{today: p.Today != nil, bound: !unboundPolicy}
				if p.note != "" {
					notes = append(notes, p.note)
				}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("pairs %+v, want %+v", got, c.want)
			}
			if !reflect.DeepEqual(notes, c.wantNotes) {
				t.Errorf("notes %q, want %q", notes, c.wantNotes)
			}
		})
	}
}
