package differential

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/auditpolicy"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
	"github.com/celaudit/celaudit/test/envtestutil"
)

const (
	// apUnboundSuffix names the AuditPolicy converted from a file's policy without a binding: the
	// policy's name followed by it. The AuditPolicy converted from a policy and one of its bindings is
	// named after the binding.
	apUnboundSuffix = "-unbound"
	// apSentinelLabel labels the ConfigMap a sentinel policy denies (see settleAdmission).
	apSentinelLabel = "celaudit.io/sentinel"
)

// The comparison must keep at least this much coverage, so that it cannot silently shrink.
const (
	apMinAuditPolicies = 40
	apMinScenarios     = vapMinScenarios
	apMinDenied        = vapMinDenied
	apMinWarned        = 10
)

// TestAuditPolicyMatchesAPIServer converts the policy and bindings of each file of testdata/vap into
// AuditPolicies with envtestutil.AuditPolicyFor, one for each binding with the enforcement its
// validationActions stand for (envtestutil.EnforcementOf) and one for the policy unbound, and
// checks, object by object, that an AuditPolicy decides what the apiserver decides for the same body
// as a ValidatingAdmissionPolicy:
//
//   - every AuditPolicy is created in the apiserver, which validates it with the AuditPolicy CRD's
//     schema and rules, and the stored AuditPolicy converts back (auditpolicy.ToAdmission) to the
//     policy and binding it was converted from;
//   - the engine compiles each stored AuditPolicy (engine.Compiler.AuditPolicy, engine.Bind, live
//     views) and evaluates each stored object: its results carry the AuditPolicy's name and have the
//     verdicts, rules and messages of the policy's results for the binding it was converted from;
//   - with the file's policy and bindings in effect, the apiserver's answer to the request for each
//     object is the one the AuditPolicies' results predict, each standing for its binding, exactly as
//     the policy's own results predict it in TestVAPMatchesAPIServer; the fixtures' expectations hold;
//   - with the policy and bindings replaced by the pairs celaudit registers for the AuditPolicies
//     (auditpolicy.Owned), Audit registered as Warn so that the apiserver shows its decisions, the
//     apiserver's answer is the one the AuditPolicies' results predict for those pairs.
//
// Subtests are named <file>/<kind>/<namespace>/<name>/{bindings,registered}.
func TestAuditPolicyMatchesAPIServer(t *testing.T) {
	groups, err := loadVAPGroups(filepath.Join("testdata", "vap"))
	if err != nil {
		t.Fatal(err)
	}
	// AuditPolicies are cluster-scoped and registered as celaudit-<name>: their names must not collide.
	names := map[string]string{}
	for _, g := range groups {
		for _, name := range auditPolicyNames(g) {
			if other, dup := names[name]; dup {
				t.Fatalf("files %s and %s both convert to AuditPolicy %s", other, g.name, name)
			}
			names[name] = g.name
		}
	}
	cl := newVAPClients(t)
	apClient := newAuditPolicyClient(t)
	// Each file deletes the pairs it registered when it ends; the other tests of the package must not
	// meet them still in effect.
	t.Cleanup(func() {
		if err := settleAdmission(context.Background(), cl.dyn, "auditpolicies-cleared"); err != nil {
			t.Error(err)
		}
	})

	total := &tally[apCounts]{}
	t.Cleanup(func() {
		got := total.get()
		if subtestFiltered() {
			t.Logf("coverage not checked, subtests are filtered: %s", got)
			return
		}
		t.Logf("compared %s", got)
		if got.auditPolicies < apMinAuditPolicies || got.scenarios < apMinScenarios || got.denied < apMinDenied ||
			got.registeredDenied < apMinDenied || got.registeredWarned < apMinWarned ||
			got.byEnforcement[v1alpha1.Audit] == 0 || got.byEnforcement[v1alpha1.Warn] == 0 || got.byEnforcement[v1alpha1.Deny] == 0 {
			t.Errorf("comparison shrank: %s; want at least %d AuditPolicies of every enforcement, %d scenarios, %d denied under the bindings and under the registered pairs, %d warned under the registered pairs",
				got, apMinAuditPolicies, apMinScenarios, apMinDenied, apMinWarned)
		}
	})

	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			runAuditPolicyGroup(t, cl, apClient, g, total)
		})
	}
}

// auditPolicyNames names the AuditPolicies converted from the file's policy: one for each binding
// and the unbound one.
func auditPolicyNames(g *vapGroup) []string {
	var out []string
	for _, b := range g.bindings {
		out = append(out, b.Name)
	}
	return append(out, g.policy.Name+apUnboundSuffix)
}

func newAuditPolicyClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("creating the AuditPolicy client: %v", err)
	}
	return c
}

// apEntry is one AuditPolicy converted from the file's policy.
type apEntry struct {
	// ap is the AuditPolicy as the apiserver stores it.
	ap *v1alpha1.AuditPolicy
	// binding is the binding ap was converted from; nil for the unbound policy.
	binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	// compiled is the engine's audit of ap, bound to the live views.
	compiled *vap.Policy
	// registered are the validationActions of the binding registered for ap.
	registered []admissionregistrationv1.ValidationAction
}

// admissionName is the name of the policy and binding registered for the AuditPolicy.
func (e *apEntry) admissionName() string { return auditpolicy.AdmissionName(e.ap.Name) }

// apGroup is one file under comparison.
type apGroup struct {
	g        *vapGroup
	cl       *vapClients
	resolver vap.ResourceResolver
	// policy is the file's, as the apiserver stores it.
	policy *admissionregistrationv1.ValidatingAdmissionPolicy
	// audited is the engine's audit of the file's policy and bindings.
	audited *vap.Policy
	entries []*apEntry
	byName  map[string]*apEntry
	exact   bool
}

// runAuditPolicyGroup installs one file, converts its policy into AuditPolicies and compares them
// with the apiserver object by object, first under the file's policy and bindings, then under the
// pairs registered for the AuditPolicies.
func runAuditPolicyGroup(t *testing.T, cl *vapClients, apClient client.Client, g *vapGroup, total *tally[apCounts]) {
	ctx := t.Context()
	resolver := installVAPObjects(t, cl, g)
	policy, bindings := installVAP(t, g)
	for _, c := range g.cases {
		if c.probe != "" {
			waitForProbe(t, cl, resolver, c)
		}
	}
	liveViews := engine.Views{
		Resources:  resolver,
		Namespaces: views.NewLiveNamespaces(ctx, cl.dyn),
		Params:     views.NewLiveParams(ctx, cl.dyn, resolver, 500),
	}
	ag := &apGroup{
		g: g, cl: cl, resolver: resolver, policy: policy,
		audited: engine.Bind(engine.Compiler{}.VAP(policy), bindings, liveViews),
		byName:  map[string]*apEntry{},
		exact: policy.Spec.MatchConstraints != nil && policy.Spec.MatchConstraints.MatchPolicy != nil &&
			*policy.Spec.MatchConstraints.MatchPolicy == admissionregistrationv1.Exact,
	}

	// Convert, create and compile each AuditPolicy.
	converted := map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	var aps []*v1alpha1.AuditPolicy
	for _, b := range bindings {
		aps = append(aps, envtestutil.AuditPolicyFor(b.Name, policy, b, envtestutil.EnforcementOf(b.Spec.ValidationActions)))
		converted[b.Name] = b
	}
	aps = append(aps, envtestutil.AuditPolicyFor(policy.Name+apUnboundSuffix, policy, nil, envtestutil.EnforcementOf(nil)))
	for _, ap := range aps {
		stored := createAuditPolicy(t, apClient, ap)
		b := converted[ap.Name]
		checkRoundTrip(t, stored, policy, b)
		compiled, binding := engine.Compiler{}.AuditPolicy(stored)
		if binding.Name != auditpolicy.AdmissionName(stored.Name) {
			t.Errorf("AuditPolicy %s compiles with binding %s, want %s", stored.Name, binding.Name, auditpolicy.AdmissionName(stored.Name))
		}
		e := &apEntry{ap: stored, binding: b, compiled: engine.Bind(compiled, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding}, liveViews)}
		ag.entries = append(ag.entries, e)
		ag.byName[stored.Name] = e
		total.add(func(n *apCounts) {
			n.auditPolicies++
			if n.byEnforcement == nil {
				n.byEnforcement = map[v1alpha1.Enforcement]int{}
			}
			n.byEnforcement[stored.EnforcementOrDefault()]++
		})
	}

	// The apiserver's answers under the file's policy and bindings.
	underBindings := ag.askAll(t)

	// The pairs celaudit registers are created, then the file's bindings and policy deleted; once a
	// sentinel policy created last is in effect, so are the pairs, and the file's policy is not.
	ag.register(t)
	for _, b := range bindings {
		if err := env.Client.Delete(ctx, b); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("deleting binding %s: %v", b.Name, err)
		}
	}
	if err := env.Client.Delete(ctx, policy); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting policy %s: %v", policy.Name, err)
	}
	if err := settleAdmission(ctx, cl.dyn, g.name+"-registered"); err != nil {
		t.Fatal(err)
	}
	underRegistered := ag.askAll(t)

	for _, c := range g.cases {
		t.Run(c.name, func(t *testing.T) {
			results, stored := ag.evaluate(t, c)
			ag.checkAgainstPolicy(t, c, stored, results)
			var bound []audit.Result
			for _, e := range ag.entries {
				if e.binding != nil {
					bound = append(bound, results[e.ap.Name]...)
				}
			}
			var all []audit.Result
			for _, e := range ag.entries {
				all = append(all, results[e.ap.Name]...)
			}
			t.Run("bindings", func(t *testing.T) {
				ans := underBindings[c]
				t.Logf("the apiserver, under the file's policy and bindings, %s", ans)
				s := &vapScenario{c: c, policy: policy, policies: []string{policy.Name}, route: ag.routeToBindings}
				s.checkAnswer(t, ans, stored, bound)
				s.checkExpectation(t, ans, bound)
				total.add(func(n *apCounts) {
					n.scenarios++
					n.inexact += s.unevaluated + s.withheld
					if ans.denial != nil {
						n.denied++
					}
				})
			})
			t.Run("registered", func(t *testing.T) {
				ans := underRegistered[c]
				t.Logf("the apiserver, under the pairs registered for the AuditPolicies, %s", ans)
				var names []string
				for _, e := range ag.entries {
					names = append(names, e.admissionName())
				}
				s := &vapScenario{c: c, policy: policy, policies: names, route: ag.routeToRegistered}
				s.checkAnswer(t, ans, stored, all)
				total.add(func(n *apCounts) {
					n.inexact += s.unevaluated + s.withheld
					if ans.denial != nil {
						n.registeredDenied++
					}
					if slices.ContainsFunc(ans.warnings, func(w string) bool { return strings.HasPrefix(w, "Validation failed for ValidatingAdmissionPolicy '") }) {
						n.registeredWarned++
					}
				})
			})
		})
	}
}

// createAuditPolicy creates ap in the apiserver, which validates it with the AuditPolicy CRD, and
// returns it as stored. It is deleted when the test ends.
func createAuditPolicy(t *testing.T, c client.Client, ap *v1alpha1.AuditPolicy) *v1alpha1.AuditPolicy {
	t.Helper()
	ctx := t.Context()
	if err := c.Create(ctx, ap.DeepCopy()); err != nil {
		t.Fatalf("the apiserver does not accept AuditPolicy %s: %v", ap.Name, err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), ap.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting AuditPolicy %s: %v", ap.Name, err)
		}
	})
	stored := &v1alpha1.AuditPolicy{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(ap), stored); err != nil {
		t.Fatalf("reading back AuditPolicy %s: %v", ap.Name, err)
	}
	return stored
}

// checkRoundTrip checks that the stored AuditPolicy stands for the policy and binding (nil: none) it
// was converted from, with the built-in exemptions added to the binding: nothing was lost converting it or
// storing it under the AuditPolicy CRD.
func checkRoundTrip(t *testing.T, stored *v1alpha1.AuditPolicy, policy *admissionregistrationv1.ValidatingAdmissionPolicy,
	binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	a := auditpolicy.ToAdmission(stored, auditpolicy.Exemptions{})
	if !apiequality.Semantic.DeepEqual(a.Policy.Spec, policy.Spec) {
		t.Errorf("AuditPolicy %s stands for another policy than %s (-policy +AuditPolicy's):\n%s", stored.Name, policy.Name, diff.Diff(policy.Spec, a.Policy.Spec))
	}
	want := admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
		PolicyName:        auditpolicy.AdmissionName(stored.Name),
		ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
	}
	if binding != nil {
		want.ParamRef = binding.Spec.ParamRef
		want.MatchResources = binding.Spec.MatchResources.DeepCopy()
		want.ValidationActions = auditpolicy.Actions(envtestutil.EnforcementOf(binding.Spec.ValidationActions))
	}
	want.MatchResources = withBuiltinExemptions(want.MatchResources)
	if !apiequality.Semantic.DeepEqual(a.Binding.Spec, want) {
		t.Errorf("AuditPolicy %s stands for another binding than %s (-want +AuditPolicy's):\n%s", stored.Name, bindingName(binding), diff.Diff(want, a.Binding.Spec))
	}
}

// withBuiltinExemptions returns m with what every AuditPolicy's binding leaves out, written out here as the
// README lists it.
func withBuiltinExemptions(m *admissionregistrationv1.MatchResources) *admissionregistrationv1.MatchResources {
	if m == nil {
		m = &admissionregistrationv1.MatchResources{}
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	m.NamespaceSelector.MatchExpressions = append(m.NamespaceSelector.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-node-lease", "kube-system"},
	})
	for _, r := range []struct{ group, resource string }{
		{"", "events"}, {"audit.celaudit.io", "*"}, {"coordination.k8s.io", "leases"}, {"events.k8s.io", "events"},
		{"openreports.io", "*"}, {"wgpolicyk8s.io", "*"},
	} {
		resources := []string{r.resource, r.resource + "/*"}
		if r.resource == "*" {
			resources = []string{"*/*"}
		}
		m.ExcludeResourceRules = append(m.ExcludeResourceRules, admissionregistrationv1.NamedRuleWithOperations{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{"*"},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{r.group}, APIVersions: []string{"*"}, Resources: resources,
					Scope: ptr.To(admissionregistrationv1.AllScopes)},
			},
		})
	}
	return m
}

func bindingName(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) string {
	if b == nil {
		return "none"
	}
	return b.Name
}

// askAll asks the apiserver about every object of the file.
func (ag *apGroup) askAll(t *testing.T) map[*vapCase]vapAnswer {
	t.Helper()
	out := map[*vapCase]vapAnswer{}
	for _, c := range ag.g.cases {
		ans, err := askAPIServer(t.Context(), ag.cl.dyn, ag.resolver, c)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		out[c] = ans
	}
	return out
}

// register creates the policy and binding celaudit registers for each AuditPolicy (auditpolicy.Owned):
// for Warn and Deny those of its enforcement, and for Audit, which registers nothing, those of Warn,
// whose warnings show what the apiserver decides without changing the AuditPolicy's audit. All
// policies are created before the bindings. They are deleted when the test ends.
func (ag *apGroup) register(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	var pairs []auditpolicy.Admission
	for _, e := range ag.entries {
		ap := e.ap.DeepCopy()
		if ap.EnforcementOrDefault() == v1alpha1.Audit {
			ap.Spec.Enforcement = v1alpha1.Warn
		}
		pair := auditpolicy.Owned(ap, auditpolicy.Exemptions{})
		if pair.Policy.Name != e.admissionName() || pair.Binding.Name != e.admissionName() || pair.Binding.Spec.PolicyName != e.admissionName() {
			t.Fatalf("the pair registered for AuditPolicy %s is named %s and %s, binding %s; want %s", e.ap.Name,
				pair.Policy.Name, pair.Binding.Name, pair.Binding.Spec.PolicyName, e.admissionName())
		}
		e.registered = pair.Binding.Spec.ValidationActions
		pairs = append(pairs, pair)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, p := range pairs {
			for _, obj := range []client.Object{p.Binding, p.Policy} {
				if err := env.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting %s: %v", obj.GetName(), err)
				}
			}
		}
	})
	for _, p := range pairs {
		if err := env.Client.Create(ctx, p.Policy); err != nil {
			t.Fatalf("registering policy %s: %v", p.Policy.Name, err)
		}
	}
	for _, p := range pairs {
		if err := env.Client.Create(ctx, p.Binding); err != nil {
			t.Fatalf("registering binding %s: %v", p.Binding.Name, err)
		}
	}
}

// evaluate returns each AuditPolicy's results on the stored object, by AuditPolicy name, and the
// stored object. Each AuditPolicy reads it at the resource it covers, as the file's policy does.
func (ag *apGroup) evaluate(t *testing.T, c *vapCase) (map[string][]audit.Result, *unstructured.Unstructured) {
	t.Helper()
	ctx := t.Context()
	out := map[string][]audit.Result{}
	var stored *unstructured.Unstructured
	for _, e := range ag.entries {
		gvr, err := vapAuditResource(ag.resolver, c.obj.GroupVersionKind(), e.compiled.Resources(), ag.exact)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := vapResource(ag.cl.dyn, gvr, c.obj.GetNamespace()).Get(ctx, c.obj.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading the stored object at %v: %v", gvr, err)
		}
		stored = obj
		results := e.compiled.Evaluate(ctx, gvr, obj)
		t.Logf("AuditPolicy %s (%s) at %v:\n%s", e.ap.Name, e.ap.EnforcementOrDefault(), gvr, dumpVAPResults(results))
		if len(results) > 0 && !slices.Contains(e.compiled.Resources(), gvr) {
			t.Errorf("AuditPolicy %s has results at %v, which is not among its resources %v", e.ap.Name, gvr, e.compiled.Resources())
		}
		for _, r := range results {
			if r.Policy != e.ap.Name {
				t.Errorf("a result of AuditPolicy %s names policy %q", e.ap.Name, r.Policy)
			}
			if b, ok := r.Properties[audit.PropBinding]; ok && b != e.admissionName() {
				t.Errorf("a result of AuditPolicy %s names binding %q, want %q", e.ap.Name, b, e.admissionName())
			}
		}
		out[e.ap.Name] = results
	}
	return out, stored
}

// checkAgainstPolicy checks that each AuditPolicy converted from a binding has the results of the
// file's policy for that binding (and of the policy as a whole), at the resource the AuditPolicy reads the object at: the same
// verdicts, rules, messages and properties but the binding and its validationActions.
func (ag *apGroup) checkAgainstPolicy(t *testing.T, c *vapCase, stored *unstructured.Unstructured, results map[string][]audit.Result) {
	t.Helper()
	ctx := t.Context()
	for _, e := range ag.entries {
		if e.binding == nil {
			continue
		}
		gvr, err := vapAuditResource(ag.resolver, c.obj.GroupVersionKind(), e.compiled.Resources(), ag.exact)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := vapResource(ag.cl.dyn, gvr, stored.GetNamespace()).Get(ctx, stored.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading the stored object at %v: %v", gvr, err)
		}
		// The policy's results for the binding, and those of the policy as a whole (a configuration
		// error), which every AuditPolicy converted from it has too.
		var policy []audit.Result
		for _, r := range ag.audited.Evaluate(ctx, gvr, obj) {
			if b, ok := r.Properties[audit.PropBinding]; !ok || b == e.binding.Name {
				policy = append(policy, r)
			}
		}
		got, want := resultKeys(results[e.ap.Name]), resultKeys(policy)
		if !slices.Equal(got, want) {
			t.Errorf("AuditPolicy %s (%s) and policy %s with binding %s %v differ at %v:\n  AuditPolicy:\n    %s\n  policy:\n    %s",
				e.ap.Name, e.ap.EnforcementOrDefault(), ag.policy.Name, e.binding.Name, e.binding.Spec.ValidationActions, gvr,
				strings.Join(got, "\n    "), strings.Join(want, "\n    "))
		}
	}
}

// resultKeys describes results by all but the policy, binding and validationActions, sorted.
func resultKeys(results []audit.Result) []string {
	out := make([]string, 0, len(results))
	for _, r := range results {
		var props []string
		for k, v := range r.Properties {
			if k != audit.PropBinding && k != audit.PropValidationActions {
				props = append(props, fmt.Sprintf("%s=%q", k, v))
			}
		}
		sort.Strings(props)
		out = append(out, fmt.Sprintf("%s %s %q {%s}", r.Verdict, withoutBinding(r), r.Message, strings.Join(props, " ")))
	}
	sort.Strings(out)
	return out
}

// withoutBinding is the rule name of r without the binding it names: an AuditPolicy's rule names name no
// binding (it has one, its own), those of the policy it stands for do.
func withoutBinding(r audit.Result) string {
	b := r.Properties[audit.PropBinding]
	if b == "" {
		return r.Rule
	}
	rule := strings.Replace(r.Rule, " (binding "+b+", ", " (", 1)
	return strings.Replace(rule, " (binding "+b+")", "", 1)
}

// routeToBindings routes a result of an AuditPolicy converted from a binding to that binding of the
// file's policy, whose decision it stands for.
func (ag *apGroup) routeToBindings(r audit.Result) vapRoute {
	rt := vapRoute{policy: ag.policy.Name}
	e := ag.byName[r.Policy]
	if e == nil || e.binding == nil {
		return rt
	}
	rt.actions = e.binding.Spec.ValidationActions
	if _, ok := r.Properties[audit.PropBinding]; ok {
		rt.binding = e.binding.Name
	}
	return rt
}

// routeToRegistered routes a result of an AuditPolicy to the pair registered for it.
func (ag *apGroup) routeToRegistered(r audit.Result) vapRoute {
	rt := vapRoute{policy: auditpolicy.AdmissionName(r.Policy)}
	if e := ag.byName[r.Policy]; e != nil {
		rt.actions = e.registered
	}
	if _, ok := r.Properties[audit.PropBinding]; ok {
		rt.binding = auditpolicy.AdmissionName(r.Policy)
	}
	return rt
}

// settleAdmission waits until the apiserver enforces the policies and bindings as they are now
// stored. It creates a sentinel policy and binding, named after name, that deny a ConfigMap labelled
// for them, asks the apiserver about that ConfigMap until it denies it, and deletes them. The
// apiserver refreshes its policies from its policy and binding informers, each of which sees the
// objects of its kind in the order they were written: once the sentinel binding and policy are in
// effect, so is every policy and binding written before them, and none deleted before them is.
func settleAdmission(ctx context.Context, dyn dynamic.Interface, name string) error {
	name = "sentinel-" + name
	message := "sentinel " + name
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"},
						},
					},
				}},
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{apSentinelLabel: name}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: message}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	if err := env.Client.Create(ctx, policy); err != nil {
		return fmt.Errorf("creating sentinel policy %s: %w", name, err)
	}
	defer func() { _ = client.IgnoreNotFound(env.Client.Delete(context.Background(), policy)) }()
	if err := env.Client.Create(ctx, binding); err != nil {
		return fmt.Errorf("creating sentinel binding %s: %w", name, err)
	}
	defer func() { _ = client.IgnoreNotFound(env.Client.Delete(context.Background(), binding)) }()

	cm := &unstructured.Unstructured{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	cm.SetName(name)
	cm.SetLabels(map[string]string{apSentinelLabel: name})
	res := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(metav1.NamespaceDefault)
	start := time.Now()
	for {
		_, err := res.Create(ctx, cm.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		var status *apierrors.StatusError
		if errors.As(err, &status) && strings.Contains(status.ErrStatus.Message, message) {
			return nil
		}
		if time.Since(start) > vapProbeTimeout || ctx.Err() != nil {
			answer := "admits"
			if err != nil {
				answer = err.Error()
			}
			return fmt.Errorf("sentinel policy %s is not in effect after %s: the apiserver last answered: %s", name, vapProbeTimeout, answer)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// apCounts is what the comparison covered.
type apCounts struct {
	auditPolicies int
	byEnforcement map[v1alpha1.Enforcement]int
	// scenarios counts the objects compared; denied, those the apiserver denied under the file's
	// bindings; registeredDenied and registeredWarned, those it denied or warned about under the
	// pairs registered for the AuditPolicies.
	scenarios, denied, registeredDenied, registeredWarned int
	// inexact counts the apiserver's texts compared with the fixture's message, the audit not
	// evaluating a messageExpression, or up to the error details the audit withholds.
	inexact int
}

func (c apCounts) String() string {
	return fmt.Sprintf("%d AuditPolicies (%d Audit, %d Warn, %d Deny) on %d objects: %d denied under the files' bindings; "+
		"under the registered pairs %d denied, %d warned about; %d texts compared with the fixture's message or up to withheld details",
		c.auditPolicies, c.byEnforcement[v1alpha1.Audit], c.byEnforcement[v1alpha1.Warn], c.byEnforcement[v1alpha1.Deny],
		c.scenarios, c.denied, c.registeredDenied, c.registeredWarned, c.inexact)
}
