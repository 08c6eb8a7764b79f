package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// mutatingPolicy returns a MutatingAdmissionPolicy on the config maps of the namespaces labelled nsLabel: yes
// (so that the API server's own mutation of other tests' objects is not affected), with one
// ApplyConfiguration mutation.
func mutatingPolicy(name, nsLabel, applyConfiguration string) *admissionregistrationv1.MutatingAdmissionPolicy {
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules:     []admissionregistrationv1.NamedRuleWithOperations{configMapRule()},
				NamespaceSelector: nsSelector(nsLabel),
			},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType:          admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: applyConfiguration},
			}},
		},
	}
}

func mutatingBinding(policy string) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: policy},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy},
	}
}

// driftLines returns the results of MutatingAdmissionPolicies in namespace ns's reports as
// "policy verdict object: message | fields | patch", with their property policyKind checked.
func driftLines(ctx context.Context, ns string) ([]string, error) {
	items, _, err := celauditResults(ctx, ns)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range items {
		if r.Properties["policyKind"] != "MutatingAdmissionPolicy" {
			continue
		}
		if r.Category != "MutatingAdmissionPolicy" || r.Rule != "mutations" {
			return nil, fmt.Errorf("result of %s has category %q and rule %q", r.Policy, r.Category, r.Rule)
		}
		name := ""
		if len(r.Resources) > 0 {
			name = r.Resources[0].Name
		}
		out = append(out, fmt.Sprintf("%s %s %s: %s | %s | %s", r.Policy, r.Result, name, r.Message, r.Properties["fields"], r.Properties["patch"]))
	}
	return out, nil
}

func expectDrift(t *testing.T, ns string, want ...string) {
	t.Helper()
	expectStrings(t, "drift results in "+ns, func(ctx context.Context) ([]string, error) { return driftLines(ctx, ns) }, want)
}

// expectDriftMetric waits until op's celaudit_mutation_drifted_objects of policy is want; -1: it has none.
func expectDriftMetric(t *testing.T, op *controllers.Operator, policy string, want float64) {
	t.Helper()
	envtestutil.Eventually(t, 30*time.Second, func() error {
		reg := prometheus.NewPedanticRegistry()
		if err := reg.Register(controllers.PolicyMetrics(op)); err != nil {
			return err
		}
		families, err := reg.Gather()
		if err != nil {
			return err
		}
		got := -1.0
		for _, f := range families {
			if f.GetName() != "celaudit_mutation_drifted_objects" {
				continue
			}
			for _, m := range f.GetMetric() {
				if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetName() == "policy" && m.GetLabel()[0].GetValue() == policy {
					got = m.GetGauge().GetValue()
				}
			}
		}
		if got != want {
			return fmt.Errorf("celaudit_mutation_drifted_objects{policy=%q} = %v, want %v", policy, got, want)
		}
		return nil
	})
}

// TestMutationDriftScenario follows MutatingAdmissionPolicies on stored config maps: drift is reported per
// policy with the patch, a policy edit changes it, a second policy sees what the first one changes (through
// reinvocation), writes that the API server mutates bring the objects in shape, and deleted policies leave
// no results. The metric and the Events follow the drifted count.
func TestMutationDriftScenario(t *testing.T) {
	ctx := context.Background()
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "md-a", Labels: map[string]string{"md-drift": "yes"}}},
		labelledConfigMap("md-a", "bare", nil),
		labelledConfigMap("md-a", "other", map[string]string{"app": "web"}),
		labelledConfigMap("md-a", "labelled", map[string]string{"team": "blue"}),
	)
	id := env.ShippedIdentity(t)
	opts := envtestutil.TestOptions()
	opts.ReportVerdicts = "pass,fail,warn,error,skip"
	op, _ := envtestutil.StartOperator(t, id.Config, opts)

	team := mutatingPolicy("md-team", "md-drift", `Object{metadata: Object.metadata{labels: {"team": "blue"}}}`)
	create(t, team, mutatingBinding("md-team"))
	deleteAfter(t, team, mutatingBinding("md-team"))
	expectDrift(t, "md-a",
		`md-team warn bare: UPDATE would change metadata.labels.team | metadata.labels.team | [{"op":"add","path":"/metadata/labels","value":{"team":"blue"}}]`,
		`md-team warn other: UPDATE would change metadata.labels.team | metadata.labels.team | [{"op":"add","path":"/metadata/labels/team","value":"blue"}]`,
		`md-team pass labelled: already as the policy makes it |  | `,
	)
	if operation, err := resultProperty("md-a", "bare", "operation"); err != nil || operation != "UPDATE" {
		t.Fatalf("operation property = %q, %v", operation, err)
	}
	expectDriftMetric(t, op, "md-team", 2)
	expectEvents(t, "MutatingAdmissionPolicy", "md-team",
		"Warning Drifted: 2 stored objects would be changed by this policy on their next write (3 matched, 0 error)")

	// A second policy, first in order, copies the team label into an annotation and asks to be reinvoked:
	// on the objects without the label, the annotation comes from the label the later policy adds.
	copier := mutatingPolicy("md-a-copy", "md-drift",
		`has(object.metadata.labels) && "team" in object.metadata.labels ? `+
			`Object{metadata: Object.metadata{annotations: {"team": object.metadata.labels["team"]}}} : Object{}`)
	copier.Spec.ReinvocationPolicy = admissionregistrationv1.IfNeededReinvocationPolicy
	create(t, copier, mutatingBinding("md-a-copy"))
	deleteAfter(t, copier, mutatingBinding("md-a-copy"))
	addAnnotation := `[{"op":"add","path":"/metadata/annotations","value":{"team":"blue"}}]`
	expectDrift(t, "md-a",
		`md-a-copy warn bare: UPDATE would change metadata.annotations.team | metadata.annotations.team | `+addAnnotation,
		`md-a-copy warn other: UPDATE would change metadata.annotations.team | metadata.annotations.team | `+addAnnotation,
		`md-a-copy warn labelled: UPDATE would change metadata.annotations.team | metadata.annotations.team | `+addAnnotation,
		`md-team warn bare: UPDATE would change metadata.labels.team | metadata.labels.team | [{"op":"add","path":"/metadata/labels","value":{"team":"blue"}}]`,
		`md-team warn other: UPDATE would change metadata.labels.team | metadata.labels.team | [{"op":"add","path":"/metadata/labels/team","value":"blue"}]`,
		`md-team pass labelled: already as the policy makes it |  | `,
	)

	// The policy is edited: another team. Every object drifts, and the copy follows.
	update(t, team, func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
		p.Spec.Mutations[0].ApplyConfiguration.Expression = `Object{metadata: Object.metadata{labels: {"team": "red"}}}`
	})
	expectDrift(t, "md-a",
		`md-a-copy warn bare: UPDATE would change metadata.annotations.team | metadata.annotations.team | [{"op":"add","path":"/metadata/annotations","value":{"team":"red"}}]`,
		`md-a-copy warn other: UPDATE would change metadata.annotations.team | metadata.annotations.team | [{"op":"add","path":"/metadata/annotations","value":{"team":"red"}}]`,
		// Its first invocation copies the stored label, its reinvocation the label the later policy changed.
		`md-a-copy warn labelled: UPDATE would change metadata.annotations.team | metadata.annotations.team | `+
			`[{"op":"add","path":"/metadata/annotations","value":{"team":"blue"}},{"op":"replace","path":"/metadata/annotations/team","value":"red"}]`,
		`md-team warn bare: UPDATE would change metadata.labels.team | metadata.labels.team | [{"op":"add","path":"/metadata/labels","value":{"team":"red"}}]`,
		`md-team warn other: UPDATE would change metadata.labels.team | metadata.labels.team | [{"op":"add","path":"/metadata/labels/team","value":"red"}]`,
		`md-team warn labelled: UPDATE would change metadata.labels.team | metadata.labels.team | [{"op":"replace","path":"/metadata/labels/team","value":"red"}]`,
	)
	expectDriftMetric(t, op, "md-team", 3)
	expectDriftMetric(t, op, "md-a-copy", 3)

	// Once the API server applies the edited policy (a dry-run create shows it), each object is written
	// once: the API server applies both policies, as celaudit said it would, and every object is in shape.
	envtestutil.Eventually(t, 30*time.Second, func() error {
		probe := labelledConfigMap("md-a", "probe", nil)
		if err := env.Client.Create(ctx, probe, client.DryRunAll); err != nil {
			return err
		}
		if probe.Labels["team"] != "red" || probe.Annotations["team"] != "red" {
			return fmt.Errorf("the API server's policies are not the edited ones yet: labels %v, annotations %v", probe.Labels, probe.Annotations)
		}
		return nil
	})
	for _, name := range []string{"bare", "other", "labelled"} {
		update(t, labelledConfigMap("md-a", name, nil), func(c *corev1.ConfigMap) { c.Data = map[string]string{"touched": "yes"} })
	}
	expectDrift(t, "md-a",
		`md-a-copy pass bare: already as the policy makes it |  | `, `md-a-copy pass other: already as the policy makes it |  | `, `md-a-copy pass labelled: already as the policy makes it |  | `,
		`md-team pass bare: already as the policy makes it |  | `, `md-team pass other: already as the policy makes it |  | `, `md-team pass labelled: already as the policy makes it |  | `,
	)
	expectDriftMetric(t, op, "md-team", 0)
	// One Event per change of the drifted count between none and some, not per rescan or count.
	expectEvents(t, "MutatingAdmissionPolicy", "md-team",
		"Warning Drifted: 2 stored objects would be changed by this policy on their next write (3 matched, 0 error)",
		"Normal InShape: No stored object would be changed by this policy on its next write (3 matched, 0 error)")
	expectEvents(t, "MutatingAdmissionPolicy", "md-a-copy",
		"Warning Drifted: 3 stored objects would be changed by this policy on their next write (3 matched, 0 error)",
		"Normal InShape: No stored object would be changed by this policy on its next write (3 matched, 0 error)")

	// Deleted policies leave no results.
	if err := env.Client.Delete(ctx, copier); err != nil {
		t.Fatal(err)
	}
	expectDrift(t, "md-a", `md-team pass bare: already as the policy makes it |  | `, `md-team pass other: already as the policy makes it |  | `, `md-team pass labelled: already as the policy makes it |  | `)
	if err := env.Client.Delete(ctx, team); err != nil {
		t.Fatal(err)
	}
	expectDrift(t, "md-a")
	expectDriftMetric(t, op, "md-team", -1)
}

// TestMutationDriftParamsScenario audits a MutatingAdmissionPolicy that reads its label from a param: a param
// edit changes the reported patch. A policy whose expression does not compile gives error results with the
// API server's message.
func TestMutationDriftParamsScenario(t *testing.T) {
	ctx := context.Background()
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mp-params"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mp-a", Labels: map[string]string{"mp-drift": "yes"}}},
		configMap("mp-params", "team", map[string]string{"team": "green"}),
		labelledConfigMap("mp-a", "one", nil),
	)
	id := env.ShippedIdentity(t)
	op, _ := envtestutil.StartOperator(t, id.Config, envtestutil.TestOptions())

	policy := mutatingPolicy("mp-team", "mp-drift", `Object{metadata: Object.metadata{labels: {"team": params.data.team}}}`)
	policy.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	binding := mutatingBinding("mp-team")
	binding.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "team", Namespace: "mp-params",
		ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
	create(t, policy, binding)
	deleteAfter(t, policy, binding)
	expectDrift(t, "mp-a",
		`mp-team warn one: UPDATE would change metadata.labels.team | metadata.labels.team | [{"op":"add","path":"/metadata/labels","value":{"team":"green"}}]`)
	expectDriftMetric(t, op, "mp-team", 1)

	update(t, configMap("mp-params", "team", nil), func(c *corev1.ConfigMap) { c.Data["team"] = "orange" })
	expectDrift(t, "mp-a",
		`mp-team warn one: UPDATE would change metadata.labels.team | metadata.labels.team | [{"op":"add","path":"/metadata/labels","value":{"team":"orange"}}]`)

	// A policy stored under other rules, whose expression this API server does not compile: with
	// failurePolicy Ignore the API server admits writes without it, and celaudit reports its error.
	broken := mutatingPolicy("mp-broken", "mp-drift", `Object{metadata: Object.metadata{labels: {"x": undefinedVariable}}}`)
	broken.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	if err := env.StoreUnvalidated(ctx, "mutatingadmissionpolicies/mp-broken", broken); err != nil {
		t.Fatal(err)
	}
	create(t, mutatingBinding("mp-broken"))
	deleteAfter(t, broken, mutatingBinding("mp-broken"))
	envtestutil.Eventually(t, 30*time.Second, func() error {
		lines, err := driftLines(ctx, "mp-a")
		if err != nil {
			return err
		}
		const want = "mp-broken error one: policy 'mp-broken' with binding 'mp-broken' denied request: compilation failed"
		for _, l := range lines {
			if strings.HasPrefix(l, want) && strings.Contains(l, "undeclared reference to 'undefinedVariable'") {
				return nil
			}
		}
		return fmt.Errorf("no result %q...undefinedVariable among %q", want, lines)
	})
	// Its author learns it where they look.
	envtestutil.Eventually(t, 30*time.Second, func() error {
		events, err := clusterObjectEvents(ctx, "MutatingAdmissionPolicy", "mp-broken")
		if err != nil {
			return err
		}
		const want = "Warning CompileFailed: Not everything compiles, so the objects it covers get error results: " +
			"spec.mutations[0].applyConfiguration.expression: compilation failed: "
		if len(events) != 1 || !strings.HasPrefix(events[0], want) || !strings.Contains(events[0], "undefinedVariable") {
			return fmt.Errorf("Events on MutatingAdmissionPolicy mp-broken: %q, want one %q...undefinedVariable", events, want)
		}
		return nil
	})
	expectPolicyMetrics(t, op, "map", "mp-broken", map[string]float64{
		"celaudit_policy_matched_objects":         1,
		"celaudit_policy_violating_objects":       0,
		`celaudit_policy_results{result="pass"}`:  0,
		`celaudit_policy_results{result="fail"}`:  0,
		`celaudit_policy_results{result="warn"}`:  0,
		`celaudit_policy_results{result="error"}`: 1,
		`celaudit_policy_results{result="skip"}`:  0,
	})
	expectDriftMetric(t, op, "mp-broken", 0)
}

// TestMutationDriftWithoutMutatingPolicies runs the operator against an API server that does not serve
// MutatingAdmissionPolicies, as one older than Kubernetes 1.36 does: it starts without them, says so once, and
// completes its first audit.
func TestMutationDriftWithoutMutatingPolicies(t *testing.T) {
	// The API and the admission plugin that needs it are both off.
	own := envtestutil.StartRestartableForTest(t,
		[2]string{"runtime-config", "admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false,admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false"},
		[2]string{"disable-admission-plugins", "MutatingAdmissionPolicy"})
	id := own.ShippedIdentity(t)
	logs := &logBuffer{}
	opts := envtestutil.TestOptions()
	opts.Logger = logs.logger()
	op, _ := envtestutil.StartOperator(t, id.Config, opts)
	envtestutil.WaitSettled(t, op)
	const line = "The API server does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicies: mutation drift is not audited"
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Errorf("logged %q %d times, want once; logs:\n%s", line, n, logs.String())
	}
}
