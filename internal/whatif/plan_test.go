package whatif

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/vap"
)

// countingCompiler compiles with engine.Compiler and counts the compilations of each object.
type countingCompiler struct {
	engine.Compiler
	counts map[any]int
}

func (c *countingCompiler) CRD(crd *apiextensionsv1.CustomResourceDefinition) audit.Policy {
	c.counts[crd]++
	return c.Compiler.CRD(crd)
}

func (c *countingCompiler) VAP(policy *admissionregistrationv1.ValidatingAdmissionPolicy) *vap.Compiled {
	c.counts[policy]++
	return c.Compiler.VAP(policy)
}

func (c *countingCompiler) AuditPolicy(ap *v1alpha1.AuditPolicy) (*vap.Compiled, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	c.counts[ap]++
	return c.Compiler.AuditPolicy(ap)
}

// anyNamespace serves every namespace name as an empty namespace.
type anyNamespace struct{}

func (anyNamespace) Get(name string) (*corev1.Namespace, error) {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
}

func testVAP(name, expression string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: expression}},
		},
	}
}

func testBinding(name, policy string, action admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy, ValidationActions: []admissionregistrationv1.ValidationAction{action},
		},
	}
}

func testAuditPolicy(name, expression string) *v1alpha1.AuditPolicy {
	vap := testVAP(name, expression)
	return &v1alpha1.AuditPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.AuditPolicySpec{
			MatchConstraints: vap.Spec.MatchConstraints, Validations: vap.Spec.Validations, Enforcement: v1alpha1.Deny,
		},
	}
}

// TestPlanCompilesEachObjectOnce plans proposals that touch policies of every kind, and counts the
// compilations of each policy object: one, whether it is compiled as today's policy, as the proposed one, for
// the onUpdate judge or to list what does not compile.
func TestPlanCompilesEachObjectOnce(t *testing.T) {
	liveCRD, proposedCRD := readCRD(t, "live.yaml"), readCRD(t, "add-v2.yaml")
	liveOwner := testVAP("owner", "has(object.metadata.labels)")
	newReplicas := testVAP("replicas", "object.spec.replicas < 3")
	broken := testVAP("broken", "object.spec.replicas <")
	liveAP, proposedAP := testAuditPolicy("ap", "true"), testAuditPolicy("ap", "object.spec.replicas < 5")
	resolver, err := vap.NewStaticResolver([]*metav1.APIResourceList{{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
		{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: metav1.Verbs{"get", "list", "watch"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	live := Live{
		CRDs:          map[string]*apiextensionsv1.CustomResourceDefinition{liveCRD.Name: liveCRD},
		VAPs:          []*admissionregistrationv1.ValidatingAdmissionPolicy{liveOwner},
		Bindings:      []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{testBinding("owner", "owner", admissionregistrationv1.Warn)},
		AuditPolicies: []*v1alpha1.AuditPolicy{liveAP},
		Views:         engine.Views{Resources: resolver, Namespaces: anyNamespace{}},
	}
	names := map[any]string{
		liveCRD: "live CRD", proposedCRD: "proposed CRD", liveOwner: "live VAP owner", newReplicas: "proposed VAP replicas",
		broken: "proposed VAP broken", liveAP: "live AuditPolicy", proposedAP: "proposed AuditPolicy",
	}
	for _, c := range []struct {
		name     string
		proposal *Proposal
		sw       *Switch
		// keys are the keys of the pairs planned; problems, when not nil, the beginnings of the problems of the
		// InputError (the rest is CEL's message).
		keys     []string
		problems []string
		// compiled are the objects compiled, each once.
		compiled []string
	}{{
		name: "every kind",
		proposal: &Proposal{
			CRDs:          []*apiextensionsv1.CustomResourceDefinition{proposedCRD},
			VAPs:          []*admissionregistrationv1.ValidatingAdmissionPolicy{newReplicas},
			Bindings:      []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{testBinding("replicas", "replicas", admissionregistrationv1.Deny)},
			AuditPolicies: []*v1alpha1.AuditPolicy{proposedAP},
		},
		sw:   &Switch{Binding: "owner", Actions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
		keys: []string{"auditpolicy/ap", "crd/widgets.example.com", "vap/owner", "vap/replicas"},
		compiled: []string{"live AuditPolicy", "live CRD", "live VAP owner", "proposed AuditPolicy", "proposed CRD",
			"proposed VAP replicas"},
	}, {
		name:     "a policy that does not compile",
		proposal: &Proposal{VAPs: []*admissionregistrationv1.ValidatingAdmissionPolicy{broken}},
		problems: []string{"<proposal>: ValidatingAdmissionPolicy broken: spec.validations[0].expression: compilation error: "},
		compiled: []string{"proposed VAP broken"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			compiler := &countingCompiler{counts: map[any]int{}}
			pairs, err := Plan(compiler, live, c.proposal, c.sw)
			var keys, problems []string
			for _, p := range pairs {
				keys = append(keys, p.Key.String())
			}
			var input *InputError
			if errors.As(err, &input) {
				problems = input.Problems
			} else if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(keys, c.keys) || !slices.EqualFunc(problems, c.problems, strings.HasPrefix) {
				t.Errorf("Plan: pairs %q, problems %q; want pairs %q, problems %q", keys, problems, c.keys, c.problems)
			}
			compiled := map[string]int{}
			for obj, n := range compiler.counts {
				compiled[names[obj]] = n
			}
			want := map[string]int{}
			for _, name := range c.compiled {
				want[name] = 1
			}
			if !reflect.DeepEqual(compiled, want) {
				t.Errorf("compilations by object: %s, want %s", fmt.Sprint(compiled), fmt.Sprint(want))
			}
		})
	}
}
