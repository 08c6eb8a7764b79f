package differential

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// Annotations of the objects of testdata/vap.
const (
	// vapAnnotationExpect marks an object to compare, with what is expected of it:
	//   deny:  the apiserver denies it and the audit fails it;
	//   admit: the apiserver admits it and the audit has no fail, warn or error result;
	//   warn:  the apiserver admits it and the audit warns (a Warn or Audit binding failed);
	//   error: the audit reports an evaluation or configuration error; the apiserver then denies
	//          under failurePolicy Fail (with a Deny binding) and admits under Ignore.
	vapAnnotationExpect = "celaudit.io/expect"
	// vapAnnotationVerdicts optionally lists the audit's verdicts for the object, sorted and
	// comma-separated ("fail,pass"), or "none" when the policy does not apply to it.
	vapAnnotationVerdicts = "celaudit.io/verdicts"
	// vapAnnotationRequest is the request the apiserver is asked about: "create" (the default) or
	// "update" (a dry-run update leaving the stored object unchanged).
	vapAnnotationRequest = "celaudit.io/request"
	// vapAnnotationProbe marks an object whose denial shows that the policy is in effect: the
	// apiserver is asked until its denial contains this text. Every file has at least one.
	vapAnnotationProbe = "celaudit.io/probe"
	// vapAnnotationCase names the subtest when kind, namespace and name do not.
	vapAnnotationCase = "celaudit.io/case"
	// vapAnnotationAPIServerMessage is the message the apiserver prints, written out by hand, for an
	// object whose audit does not evaluate the messageExpression of the validation it fails (it says
	// why in the messageExpression property, e.g. the expression may read a Secret's data) and
	// reports the message the apiserver falls back to instead. The apiserver evaluates the
	// messageExpression: its denial or warning must carry exactly this text. Every message the audit
	// does not evaluate needs it, so no message goes uncompared.
	vapAnnotationAPIServerMessage = "celaudit.io/apiserver-message"
	// vapGroupLabel confines each file's policy to that file's objects, so that files run in
	// parallel without one policy judging another file's objects: every compared object carries it
	// and every policy's objectSelector requires it (ANDed with the file's own selector).
	vapGroupLabel = "celaudit.io/vap-group"
)

// The fixtures must keep at least this much coverage, so that the comparison cannot silently shrink.
const (
	vapMinScenarios = 60
	vapMinDenied    = 20
	vapMinAdmitted  = 20
)

// The texts the apiserver's validating admission policy dispatcher (k8s.io/apiserver
// pkg/admission/plugin/policy/validating/dispatcher.go) builds from a decision's message.
const (
	vapDenialWithBinding = "ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s"
	vapDenialOfPolicy    = "ValidatingAdmissionPolicy '%s' denied request: %s"
	vapWarning           = "Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s"
	vapConfigBinding     = "failed to configure binding: "
	// vapRuntimeError ends the apiserver's text of an expression's runtime error before the error
	// (k8s.io/apiserver pkg/admission/plugin/cel/activation.go), where the audit may withhold the details
	// (vapWithheldDetails).
	vapRuntimeError    = " resulted in error: "
	vapWithheldDetails = vapRuntimeError + "details withheld: "
)

// TestVAPMatchesAPIServer installs each file of testdata/vap (a policy, its bindings, the namespaces,
// params and CRDs they need), stores the file's objects before the policy exists, as the product
// finds them, and then compares, object by object, the apiserver's answer to a request for the
// object with the audit of the stored object: denied exactly when the audit predicts a denial, with
// the audit's message and reason; warned exactly with the audit's warnings. Where the audit does not
// evaluate a messageExpression, the apiserver's message is compared in full with the one the fixture
// writes out (vapAnnotationAPIServerMessage). Subtests are named <file>/<kind>/<namespace>/<name>.
func TestVAPMatchesAPIServer(t *testing.T) {
	groups, err := loadVAPGroups(filepath.Join("testdata", "vap"))
	if err != nil {
		t.Fatal(err)
	}
	cl := newVAPClients(t)

	total := &tally[vapCounts]{}
	t.Cleanup(func() {
		got := total.get()
		if subtestFiltered() {
			t.Logf("coverage not checked, subtests are filtered: %s", got)
			return
		}
		t.Logf("compared %s", got)
		if got.scenarios < vapMinScenarios || got.denied < vapMinDenied || got.admitted < vapMinAdmitted {
			t.Errorf("comparison shrank: %s; want at least %d scenarios, %d denied, %d admitted",
				got, vapMinScenarios, vapMinDenied, vapMinAdmitted)
		}
	})

	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			runVAPGroup(t, cl, g, total)
		})
	}
}

// TestVAPFixtureCoverage checks, from the fixture files alone, that they keep the coverage the
// comparison promises; the comparison then checks that the apiserver agrees with each expectation.
func TestVAPFixtureCoverage(t *testing.T) {
	groups, err := loadVAPGroups(filepath.Join("testdata", "vap"))
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	scenarios := 0
	for _, g := range groups {
		for _, c := range g.cases {
			scenarios++
			n[c.expect]++
		}
	}
	// Expected denials: "deny" and some "error"; expected admissions: "admit", "warn" and the rest.
	if scenarios < vapMinScenarios || n["deny"] < vapMinDenied || n["admit"]+n["warn"] < vapMinAdmitted {
		t.Errorf("fixtures: %d scenarios (%v); want at least %d scenarios, %d expected denied, %d expected admitted",
			scenarios, n, vapMinScenarios, vapMinDenied, vapMinAdmitted)
	}
}

// vapClients are the clients every file shares.
type vapClients struct {
	// dyn reports warnings to the vapWarnings collector in the request's context.
	dyn       dynamic.Interface
	discovery discovery.DiscoveryInterface
}

func newVAPClients(t *testing.T) *vapClients {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = nil
	cfg.WarningHandlerWithContext = vapWarningRouter{}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating dynamic client: %v", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatalf("creating discovery client: %v", err)
	}
	return &vapClients{dyn: dyn, discovery: dc}
}

// runVAPGroup installs one file and compares each of its objects.
func runVAPGroup(t *testing.T, cl *vapClients, g *vapGroup, total *tally[vapCounts]) {
	ctx := t.Context()
	resolver := installVAPObjects(t, cl, g)
	policy, bindings := installVAP(t, g)
	for _, c := range g.cases {
		if c.probe != "" {
			waitForProbe(t, cl, resolver, c)
		}
	}

	// The audit reads the cluster as a what-if run does: live views, each param and namespace read once.
	compiled := engine.Bind(engine.Compiler{}.VAP(policy), bindings, engine.Views{
		Resources:  resolver,
		Namespaces: views.NewLiveNamespaces(ctx, cl.dyn),
		Params:     views.NewLiveParams(ctx, cl.dyn, resolver, 500),
	})
	if len(compiled.Resources()) == 0 {
		t.Fatalf("the audit of policy %s reads no resource", policy.Name)
	}
	actions := map[string][]admissionregistrationv1.ValidationAction{}
	for _, b := range bindings {
		actions[b.Name] = b.Spec.ValidationActions
	}
	route := func(r audit.Result) vapRoute {
		binding := r.Properties[audit.PropBinding]
		return vapRoute{policy: policy.Name, binding: binding, actions: actions[binding]}
	}
	exact := policy.Spec.MatchConstraints != nil && policy.Spec.MatchConstraints.MatchPolicy != nil &&
		*policy.Spec.MatchConstraints.MatchPolicy == admissionregistrationv1.Exact

	for _, c := range g.cases {
		t.Run(c.name, func(t *testing.T) {
			s := &vapScenario{
				c:        c,
				policy:   policy,
				policies: []string{policy.Name},
				route:    route,
				compiled: compiled,
				resolver: resolver,
				dyn:      cl.dyn,
				exact:    exact,
			}
			denied := s.compare(t)
			total.add(func(n *vapCounts) {
				n.scenarios++
				n.unevaluated += s.unevaluated
				if denied {
					n.denied++
				} else {
					n.admitted++
				}
			})
		})
	}
}

// installVAPObjects stores the file's CRDs, namespaces, params and compared objects, and returns the
// resolver of the cluster's resources. The objects are stored before the policy exists: the product
// audits objects stored before a policy, and this gives the audit exactly what the apiserver stores
// (defaults, integer types). The tests of testdata/vap share the one cluster and its objects: what
// another test stored already, from the same file, is left as it is.
func installVAPObjects(t *testing.T, cl *vapClients, g *vapGroup) *vap.StaticResolver {
	t.Helper()
	ctx := t.Context()
	for _, crd := range g.crds {
		if err := env.Client.Create(ctx, crd.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating CRD %s: %v", crd.Name, err)
		}
		if err := envtestutil.WaitEstablished(ctx, env.Client, crd.Name); err != nil {
			t.Fatal(err)
		}
	}
	resolver, err := vapResolver(ctx, cl.discovery, g.kinds())
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range g.setup {
		if err := vapCreate(ctx, cl.dyn, resolver, obj); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range g.cases {
		if err := vapCreate(ctx, cl.dyn, resolver, c.obj); err != nil {
			t.Fatal(err)
		}
	}
	return resolver
}

// installVAP creates the policy, confined to the file's objects, and its bindings in file order,
// and returns them as the apiserver stores them (defaulted). They are deleted when the test ends.
func installVAP(t *testing.T, g *vapGroup) (*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	ctx := t.Context()
	policy := g.policy.DeepCopy()
	if policy.Spec.MatchConstraints == nil {
		t.Fatalf("policy %s has no matchConstraints", policy.Name)
	}
	confineToGroup(policy.Spec.MatchConstraints, g.name)
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatalf("creating policy %s: %v", policy.Name, err)
	}
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), policy); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting policy %s: %v", policy.Name, err)
		}
	})
	// Bindings are created in file order, and the apiserver's binding informer sees them in that
	// order: once a probe shows a binding in effect, the ones before it are in effect too.
	var bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, b := range g.bindings {
		b := b.DeepCopy()
		if err := env.Client.Create(ctx, b); err != nil {
			t.Fatalf("creating binding %s: %v", b.Name, err)
		}
		t.Cleanup(func() {
			if err := env.Client.Delete(context.Background(), b); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting binding %s: %v", b.Name, err)
			}
		})
		bindings = append(bindings, b)
	}

	stored := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(policy), stored); err != nil {
		t.Fatalf("reading back policy %s: %v", policy.Name, err)
	}
	var storedBindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, b := range bindings {
		sb := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), sb); err != nil {
			t.Fatalf("reading back binding %s: %v", b.Name, err)
		}
		storedBindings = append(storedBindings, sb)
	}
	return stored, storedBindings
}

// confineToGroup adds the requirement of the file's label to m's objectSelector.
func confineToGroup(m *admissionregistrationv1.MatchResources, group string) {
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	m.ObjectSelector.MatchExpressions = append(m.ObjectSelector.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: vapGroupLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{group},
	})
}

// vapProbeTimeout bounds the wait for a policy to take effect. A new policy or binding takes effect
// when the apiserver next refreshes its policies (every second) and params are usable once their
// informer has synced; but a paramKind served by a CRD created moments before resolves only after
// the apiserver next resets its admission RESTMapper, which it does every 30 seconds
// (k8s.io/apiserver pkg/server/options/admission.go).
const vapProbeTimeout = 60 * time.Second

// waitForProbe asks the apiserver about c until its denial contains c.probe; until the policy is in
// effect, requests are admitted or denied otherwise.
func waitForProbe(t *testing.T, cl *vapClients, resolver vap.ResourceResolver, c *vapCase) {
	t.Helper()
	ctx := t.Context()
	start := time.Now()
	for {
		ans, err := askAPIServer(ctx, cl.dyn, resolver, c)
		if err != nil {
			t.Fatalf("probe %s: %v", c.name, err)
		}
		if ans.denial != nil && strings.Contains(ans.denial.ErrStatus.Message, c.probe) {
			t.Logf("probe %s denied after %s", c.name, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > vapProbeTimeout {
			t.Fatalf("the policy is not in effect after %s: probe %s was last answered: the apiserver %s; want a denial containing %q",
				vapProbeTimeout, c.name, ans, c.probe)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// vapScenario is one object of a file, compared under the file's policy.
type vapScenario struct {
	c      *vapCase
	policy *admissionregistrationv1.ValidatingAdmissionPolicy
	// policies name the ValidatingAdmissionPolicies whose warnings are compared.
	policies []string
	// route says how the apiserver names and handles the decision a result stands for.
	route    func(audit.Result) vapRoute
	compiled *vap.Policy
	resolver vap.ResourceResolver
	dyn      dynamic.Interface
	exact    bool
	// unevaluated counts the apiserver's texts whose message the audit did not evaluate, each
	// compared with the fixture's text (see vapAnnotationAPIServerMessage).
	unevaluated int
	// withheld counts the apiserver's texts compared up to the error details the audit withholds.
	withheld int
}

// compare asks the apiserver and the audit about the scenario's object, reports every disagreement
// and returns whether the apiserver denied the request.
func (s *vapScenario) compare(t *testing.T) bool {
	ctx := t.Context()
	c := s.c

	ans, err := askAPIServer(ctx, s.dyn, s.resolver, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the apiserver %s", ans)

	auditGVR, err := vapAuditResource(s.resolver, c.obj.GroupVersionKind(), s.compiled.Resources(), s.exact)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := vapResource(s.dyn, auditGVR, c.obj.GetNamespace()).Get(ctx, c.obj.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the stored object at %v: %v", auditGVR, err)
	}
	results := s.compiled.Evaluate(ctx, auditGVR, stored)
	t.Logf("the audit at %v:\n%s", auditGVR, dumpVAPResults(results))
	if len(results) > 0 && !slices.Contains(s.compiled.Resources(), auditGVR) {
		t.Errorf("the audit has results at %v, which is not among its resources %v", auditGVR, s.compiled.Resources())
	}

	s.checkAnswer(t, ans, stored, results)
	s.checkExpectation(t, ans, results)
	return ans.denial != nil
}

// checkAnswer checks the apiserver's answer to the request for the scenario's object against the
// audit's results on the stored object: the denial and the warnings the results predict, the messages
// the audit falls back to, the operation, and that no result shows a Secret's data.
func (s *vapScenario) checkAnswer(t *testing.T, ans vapAnswer, stored *unstructured.Unstructured, results []audit.Result) {
	t.Helper()
	c := s.c
	want := predictAPIServer(results, s.route)
	s.checkDenial(t, ans, want)
	s.checkWarnings(t, ans, want)
	if c.apiserverMessage != "" && s.unevaluated == 0 && !t.Failed() {
		t.Errorf("the fixture gives the apiserver's message %q, but the apiserver printed no message the audit did not evaluate", c.apiserverMessage)
	}
	s.checkFallbackMessages(t, results)
	checkOperation(t, c, results)
	if stored.GetKind() == "Secret" {
		checkNoSecretLeak(t, stored, ans, results)
	}
}

// vapAuditResource is the resource an audit covering resources reads an object of kind gvk at: the
// version the policy names, as the product reads it, when the policy matches equivalent resources
// (the apiserver converts the request to that version); under matchPolicy Exact, the version of the
// request, which the policy matches only if it names it.
func vapAuditResource(resolver vap.ResourceResolver, gvk schema.GroupVersionKind, resources []schema.GroupVersionResource, exact bool) (schema.GroupVersionResource, error) {
	r, err := resolver.ResourceForKind(gvk)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("resolving the object's kind: %w", err)
	}
	if exact {
		return r.Resource, nil
	}
	equivalent := resolver.EquivalentResourcesFor(r.Resource, "")
	for _, gvr := range resources {
		if slices.Contains(equivalent, gvr) {
			return gvr, nil
		}
	}
	return r.Resource, nil
}

// checkDenial checks that the apiserver denied exactly when the audit predicts a denial, with one of
// the predicted texts and its status reason.
func (s *vapScenario) checkDenial(t *testing.T, ans vapAnswer, want vapPrediction) {
	if ans.denial == nil {
		if len(want.denials) > 0 {
			t.Errorf("verdicts differ: the apiserver admits, the audit predicts the denial\n  %s", strings.Join(want.denialTexts(), "\n  "))
		}
		return
	}
	text := ans.denial.ErrStatus.Message
	if len(want.denials) == 0 {
		t.Errorf("verdicts differ: the apiserver denies, the audit predicts no denial\n  apiserver: %s", text)
		return
	}
	prefix := fmt.Sprintf("%s %q is forbidden: ", ans.resource.GroupResource(), s.c.obj.GetName())
	message, ok := strings.CutPrefix(text, prefix)
	if !ok {
		t.Errorf("the apiserver's denial does not start with %q: %s", prefix, text)
		return
	}
	// The apiserver prints only its first denial, in an order of bindings and params of its own.
	d, ok := want.match(want.denials, message, s.c.apiserverMessage)
	if !ok {
		_, theirs, _ := strings.Cut(message, "denied request: ")
		var ours []string
		for _, d := range want.denials {
			ours = append(ours, d.message)
		}
		t.Errorf("messages differ\n  apiserver: %q\n  audit:     %q\n  apiserver's denial: %s\n  audit's denials:\n    %s%s",
			theirs, ours, message, strings.Join(want.denialTexts(), "\n    "), s.unevaluatedHint(want.denials))
		return
	}
	if message != d.text {
		s.noteInexact(t, "message", message, d)
	}
	if got := string(ans.denial.ErrStatus.Reason); got != d.reason {
		t.Errorf("the apiserver denies with reason %s, the audit's result has reason %s", got, d.reason)
	}
}

// checkWarnings checks that the apiserver warned with exactly the warnings the audit predicts.
func (s *vapScenario) checkWarnings(t *testing.T, ans vapAnswer, want vapPrediction) {
	var got []string
	for _, w := range ans.warnings {
		for _, policy := range s.policies {
			if strings.HasPrefix(w, fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' ", policy)) {
				got = append(got, w)
			}
		}
	}
	got = sortedUnique(got)
	var wanted []string
	for _, w := range want.warnings {
		wanted = append(wanted, w.text)
	}
	wanted = sortedUnique(wanted)
	matched := true
	for _, g := range got {
		p, ok := want.match(want.warnings, g, s.c.apiserverMessage)
		switch {
		case !ok:
			matched = false
		case g != p.text:
			s.noteInexact(t, "warning", g, p)
		}
	}
	for _, w := range want.warnings {
		if !slices.ContainsFunc(got, func(g string) bool { return w.matches(g, s.c.apiserverMessage) }) {
			matched = false
		}
	}
	if !matched {
		t.Errorf("warnings differ\n  apiserver:\n    %s\n  audit:\n    %s%s", strings.Join(got, "\n    "), strings.Join(wanted, "\n    "),
			s.unevaluatedHint(want.warnings))
	}
}

// noteInexact logs the apiserver's text that matched the prediction p other than exactly, and counts it.
func (s *vapScenario) noteInexact(t *testing.T, what, text string, p vapPredicted) {
	if p.withheld != "" && strings.HasPrefix(text, p.prefix+p.withheld) {
		t.Logf("%s compared up to the error details the audit withholds\n  apiserver: %s\n  audit:     %s", what, text, p.text)
		s.withheld++
		return
	}
	t.Logf("%s compared with the fixture's, the audit not evaluating its message: %s\n  apiserver: %s\n  audit:     %s", what, p.why, text, p.text)
	s.unevaluated++
}

// checkFallbackMessages checks the results whose messageExpression the audit did not evaluate (it says
// why in the messageExpression property): their message must be the one the apiserver falls back to,
// the validation's message, else "failed expression: " and the expression.
func (s *vapScenario) checkFallbackMessages(t *testing.T, results []audit.Result) {
	for _, r := range results {
		if _, declared := r.Properties[vap.PropMessageExpression]; !declared || r.Verdict != audit.Fail && r.Verdict != audit.Warn {
			continue
		}
		var i int
		if _, err := fmt.Sscanf(r.Rule, "validations[%d]", &i); err != nil || i < 0 || i >= len(s.policy.Spec.Validations) {
			t.Errorf("result %q names no validation of the policy: rule %q", r.Message, r.Rule)
			continue
		}
		v := s.policy.Spec.Validations[i]
		want := strings.TrimSpace(v.Message)
		if want == "" {
			want = "failed expression: " + strings.TrimSpace(v.Expression)
		}
		if r.Message != want {
			t.Errorf("result of %s without its messageExpression has message %q, the apiserver's fallback is %q", r.Rule, r.Message, want)
		}
	}
}

// checkExpectation checks the fixture's expectation, so that a fixture that no longer tests what it
// says is caught.
func (s *vapScenario) checkExpectation(t *testing.T, ans vapAnswer, results []audit.Result) {
	c := s.c
	n := map[audit.Verdict]int{}
	var verdicts []string
	for _, r := range results {
		n[r.Verdict]++
		verdicts = append(verdicts, string(r.Verdict))
	}
	denied := ans.denial != nil
	ok := true
	switch c.expect {
	case "deny":
		ok = denied && n[audit.Fail] > 0
	case "admit":
		ok = !denied && n[audit.Fail]+n[audit.Warn]+n[audit.Error] == 0
	case "warn":
		ok = !denied && n[audit.Warn] > 0 && n[audit.Fail]+n[audit.Error] == 0
	case "error":
		ok = n[audit.Error] > 0
	}
	if !ok {
		t.Errorf("the fixture expects %s; the apiserver %s; the audit's verdicts are %v", c.expect, ans, verdicts)
	}
	if c.verdicts != "" {
		sort.Strings(verdicts)
		got := strings.Join(verdicts, ",")
		if got == "" {
			got = "none"
		}
		if got != c.verdicts {
			t.Errorf("the audit's verdicts are %s, the fixture expects %s", got, c.verdicts)
		}
	}
}

// checkOperation checks that the audit judged the object as the request the apiserver was asked about.
func checkOperation(t *testing.T, c *vapCase, results []audit.Result) {
	want := strings.ToUpper(c.request)
	for _, r := range results {
		if op, ok := r.Properties[audit.PropOperation]; ok && op != want {
			t.Errorf("result %s %q was evaluated as %s, the apiserver was asked about %s", r.Verdict, r.Message, op, want)
		}
	}
}

// checkNoSecretLeak checks that no result of the audit shows a value of the secret's data, encoded or
// decoded, unless the apiserver's own answer shows it too.
func checkNoSecretLeak(t *testing.T, secret *unstructured.Unstructured, ans vapAnswer, results []audit.Result) {
	data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
	var values []string
	for _, v := range data {
		values = append(values, v)
		if decoded, err := base64.StdEncoding.DecodeString(v); err == nil {
			values = append(values, string(decoded))
		}
	}
	theirs := strings.Join(ans.warnings, "\n")
	if ans.denial != nil {
		theirs += "\n" + ans.denial.ErrStatus.Message
	}
	for _, r := range results {
		texts := []string{r.Message}
		for k, v := range r.Properties {
			if !strings.HasPrefix(k, vap.PropAuditAnnotationPrefix) {
				texts = append(texts, v)
			}
		}
		for _, text := range texts {
			for _, v := range values {
				if len(v) >= 3 && strings.Contains(text, v) && !strings.Contains(theirs, v) {
					t.Errorf("result %s %q shows secret data %q that the apiserver does not show", r.Verdict, r.Message, v)
				}
			}
		}
	}
}

// vapPrediction is what the apiserver's dispatcher makes of the audit's results.
type vapPrediction struct {
	denials  []vapPredicted
	warnings []vapPredicted
}

// vapPredicted is one denial or warning text the dispatcher would build from a result.
type vapPredicted struct {
	text    string
	message string
	// reason is the status reason of a denial.
	reason string
	// unevaluated says that the audit did not evaluate the validation's messageExpression (why says
	// why) and reports the apiserver's fallback message instead. The apiserver evaluates it: its text
	// is then prefix (the policy and binding) followed by the message the fixture gives
	// (vapAnnotationAPIServerMessage), unless it falls back too.
	unevaluated bool
	prefix      string
	why         string
	// withheld is set for an evaluation error whose details the audit withholds because the expression
	// may read a Secret's data, stringData or annotations (internal/vap/withhold.go): it is the audit's
	// message up to the details, "expression '<expression>' resulted in error: ". The apiserver's text
	// is then prefix and withheld followed by the details.
	withheld string
}

// matches reports whether the apiserver's text is the predicted one: the audit's, for a message the
// audit did not evaluate, the one with the fixture's message apiserverMessage ("" when the fixture
// gives none, which matches nothing), and for an error whose details the audit withholds, one with
// the audit's text up to the details.
func (p vapPredicted) matches(text, apiserverMessage string) bool {
	if text == p.text {
		return true
	}
	if p.withheld != "" && len(text) > len(p.prefix+p.withheld) && strings.HasPrefix(text, p.prefix+p.withheld) {
		return true
	}
	return p.unevaluated && apiserverMessage != "" && text == p.prefix+apiserverMessage
}

// match returns the prediction text matches (see vapPredicted.matches), preferring the audit's own text.
func (vapPrediction) match(predicted []vapPredicted, text, apiserverMessage string) (vapPredicted, bool) {
	for _, p := range predicted {
		if p.text == text {
			return p, true
		}
	}
	for _, p := range predicted {
		if p.matches(text, apiserverMessage) {
			return p, true
		}
	}
	return vapPredicted{}, false
}

// unevaluatedHint explains a difference that may come from a message the audit did not evaluate: the
// apiserver's text is then compared with the fixture's, which must give it.
func (s *vapScenario) unevaluatedHint(predicted []vapPredicted) string {
	for _, p := range predicted {
		if p.unevaluated {
			return fmt.Sprintf("\n  the audit did not evaluate a message (%s); the apiserver's is compared with the fixture's %s %q",
				p.why, vapAnnotationAPIServerMessage, s.c.apiserverMessage)
		}
	}
	return ""
}

func (p vapPrediction) denialTexts() []string {
	out := make([]string, 0, len(p.denials))
	for _, d := range p.denials {
		out = append(out, d.text)
	}
	return sortedUnique(out)
}

// predictAPIServer applies the dispatcher's rules to the audit's results: a failed validation is
// denied by a Deny binding (with the validation's reason) and warned about by a Warn binding; an
// evaluation error under failurePolicy Fail is a failed decision handled the same way, with reason
// Invalid; a configuration error or an auditAnnotation error under Fail is denied whatever the
// binding's actions; anything under failurePolicy Ignore is admitted silently, and Audit leaves no
// trace on the response. The apiserver drops a warning whose text is not a valid warning header: one
// with a control character, such as a line break (k8s.io/apiserver pkg/endpoints/filters/warning.go).
func predictAPIServer(results []audit.Result, route func(audit.Result) vapRoute) vapPrediction {
	var p vapPrediction
	invalid := string(metav1.StatusReasonInvalid)
	predict := func(format string, r audit.Result, reason string, args ...any) vapPredicted {
		text := fmt.Sprintf(format, append(args, r.Message)...)
		prefix := fmt.Sprintf(format, append(args, "")...)
		why, unevaluated := r.Properties[vap.PropMessageExpression]
		var withheld string
		if before, _, ok := strings.Cut(r.Message, vapWithheldDetails); ok && r.Verdict == audit.Error && strings.HasPrefix(before, "expression '") {
			withheld = before + vapRuntimeError
		}
		return vapPredicted{text: text, message: r.Message, reason: reason, unevaluated: unevaluated, prefix: prefix, why: why, withheld: withheld}
	}
	warning := func(w vapPredicted) {
		if utf8.ValidString(w.text) && !strings.ContainsFunc(w.text, unicode.IsControl) {
			p.warnings = append(p.warnings, w)
		}
	}
	for _, r := range results {
		rt := route(r)
		policy, binding := rt.policy, rt.binding
		deny := slices.Contains(rt.actions, admissionregistrationv1.Deny)
		warn := slices.Contains(rt.actions, admissionregistrationv1.Warn)
		switch r.Verdict {
		case audit.Fail:
			reason := r.Properties[audit.PropReason]
			if reason == "" {
				reason = invalid
			}
			p.denials = append(p.denials, predict(vapDenialWithBinding, r, reason, policy, binding))
		case audit.Warn:
			if warn {
				warning(predict(vapWarning, r, "", policy, binding))
			}
		case audit.Error:
			if r.Properties[audit.PropFailurePolicy] != string(admissionregistrationv1.Fail) {
				continue
			}
			switch {
			case binding == "":
				p.denials = append(p.denials, predict(vapDenialOfPolicy, r, invalid, policy))
			case strings.HasPrefix(r.Message, vapConfigBinding) || strings.HasPrefix(r.Rule, "auditAnnotations[") || deny:
				p.denials = append(p.denials, predict(vapDenialWithBinding, r, invalid, policy, binding))
			case warn:
				warning(predict(vapWarning, r, "", policy, binding))
			}
		}
	}
	return p
}

// vapRoute is what the apiserver's dispatcher knows of the decision a result stands for: the policy and
// binding it names ("" for a decision of the policy as a whole) and the binding's validationActions.
type vapRoute struct {
	policy, binding string
	actions         []admissionregistrationv1.ValidationAction
}

// vapAnswer is the apiserver's answer to a request.
type vapAnswer struct {
	resource schema.GroupVersionResource
	// denial is the policy's denial; nil when the request was admitted.
	denial   *apierrors.StatusError
	warnings []string
}

func (a vapAnswer) String() string {
	s := "admits"
	if a.denial != nil {
		s = fmt.Sprintf("denies (%s): %s", a.denial.ErrStatus.Reason, a.denial.ErrStatus.Message)
	}
	if len(a.warnings) > 0 {
		s += fmt.Sprintf(" with warnings %q", a.warnings)
	}
	return s
}

// askAPIServer sends the scenario's request as a server-side dry run. A create of an object that is
// already stored is admitted when it reaches the storage layer, after admission, which then answers
// AlreadyExists; an update sends the stored object back unchanged.
func askAPIServer(ctx context.Context, dyn dynamic.Interface, resolver vap.ResourceResolver, c *vapCase) (vapAnswer, error) {
	r, err := resolver.ResourceForKind(c.obj.GroupVersionKind())
	if err != nil {
		return vapAnswer{}, fmt.Errorf("resolving the object's kind: %w", err)
	}
	ans := vapAnswer{resource: r.Resource}
	res := vapResource(dyn, r.Resource, c.obj.GetNamespace())
	collector := &vapWarnings{}
	ctx = context.WithValue(ctx, vapWarningsKey{}, collector)
	dryRun := []string{metav1.DryRunAll}
	switch c.request {
	case "update":
		var stored *unstructured.Unstructured
		if stored, err = res.Get(ctx, c.obj.GetName(), metav1.GetOptions{}); err != nil {
			return vapAnswer{}, fmt.Errorf("reading the stored object to update: %w", err)
		}
		_, err = res.Update(ctx, stored, metav1.UpdateOptions{DryRun: dryRun})
	default:
		_, err = res.Create(ctx, c.obj.DeepCopy(), metav1.CreateOptions{DryRun: dryRun})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	}
	ans.warnings = collector.get()
	if err == nil {
		return ans, nil
	}
	var status *apierrors.StatusError
	if errors.As(err, &status) && strings.Contains(status.ErrStatus.Message, "ValidatingAdmissionPolicy '") {
		ans.denial = status
		return ans, nil
	}
	return vapAnswer{}, fmt.Errorf("the apiserver answered neither with an admission nor with a policy's denial: %w", err)
}

// vapWarningsKey is the context key of the vapWarnings collecting a request's warnings.
type vapWarningsKey struct{}

// vapWarningRouter hands each warning to the collector in the request's context, so that one client
// serves requests of files running in parallel.
type vapWarningRouter struct{}

func (vapWarningRouter) HandleWarningHeaderWithContext(ctx context.Context, _ int, _ string, text string) {
	if w, ok := ctx.Value(vapWarningsKey{}).(*vapWarnings); ok {
		w.add(text)
	}
}

type vapWarnings struct {
	mu    sync.Mutex
	texts []string
}

func (w *vapWarnings) add(text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.texts = append(w.texts, text)
}

func (w *vapWarnings) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.texts)
}

// vapResolver builds the audit's resource resolver from the apiserver's discovery, each group's
// preferred version first, as the operator builds it. It waits until discovery serves every kind in
// want (new CRDs appear in discovery a moment after they are established).
func vapResolver(ctx context.Context, dc discovery.DiscoveryInterface, want []schema.GroupVersionKind) (*vap.StaticResolver, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resolver, err := func() (*vap.StaticResolver, error) {
			r, err := views.LiveResources(ctx, dc)
			if err != nil {
				return nil, err
			}
			for _, gvk := range want {
				if _, err := r.ResourceForKind(gvk); err != nil {
					return nil, fmt.Errorf("discovery does not serve %v yet: %w", gvk, err)
				}
			}
			return r, nil
		}()
		if err == nil {
			return resolver, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// vapCreate stores obj, unless another test of the package stored it already. A custom resource is
// served a moment after its CRD is established: until then the resource is not found, and the
// request is retried.
func vapCreate(ctx context.Context, dyn dynamic.Interface, resolver vap.ResourceResolver, obj *unstructured.Unstructured) error {
	r, err := resolver.ResourceForKind(obj.GroupVersionKind())
	if err != nil {
		return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	res := vapResource(dyn, r.Resource, obj.GetNamespace())
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := res.Create(ctx, obj.DeepCopy(), metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if !apierrors.IsNotFound(err) && !apierrors.IsMethodNotSupported(err) || time.Now().After(deadline) {
			return fmt.Errorf("creating %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func vapResource(dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return dyn.Resource(gvr)
	}
	return dyn.Resource(gvr).Namespace(namespace)
}

func dumpVAPResults(results []audit.Result) string {
	if len(results) == 0 {
		return "  (no results)"
	}
	var b strings.Builder
	for _, r := range results {
		fmt.Fprintf(&b, "  %s %s binding=%q param=%q operation=%s failurePolicy=%s: %q\n", r.Verdict, r.Rule,
			r.Properties[audit.PropBinding], r.Properties[audit.PropParam], r.Properties[audit.PropOperation],
			r.Properties[audit.PropFailurePolicy], r.Message)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func sortedUnique(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return slices.Compact(out)
}

// vapCounts is what the comparison covered.
type vapCounts struct {
	scenarios, denied, admitted int
	// unevaluated counts the apiserver's texts whose message the audit did not evaluate, compared
	// with the fixtures' texts instead.
	unevaluated int
}

func (c vapCounts) String() string {
	return fmt.Sprintf("%d scenarios (%d denied, %d admitted; %d messages the audit does not evaluate compared with the fixtures')",
		c.scenarios, c.denied, c.admitted, c.unevaluated)
}

// vapGroup is one file of testdata/vap.
type vapGroup struct {
	name     string
	crds     []*apiextensionsv1.CustomResourceDefinition
	setup    []*unstructured.Unstructured // namespaces first, then the other objects in file order
	policy   *admissionregistrationv1.ValidatingAdmissionPolicy
	bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	cases    []*vapCase
}

// kinds lists the kinds the group creates, which discovery must serve before they are created.
func (g *vapGroup) kinds() []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for _, o := range g.setup {
		out = append(out, o.GroupVersionKind())
	}
	for _, c := range g.cases {
		out = append(out, c.obj.GroupVersionKind())
	}
	return out
}

// vapCase is one object to compare.
type vapCase struct {
	name             string
	expect           string
	verdicts         string
	request          string
	probe            string
	apiserverMessage string
	obj              *unstructured.Unstructured
}

// loadVAPGroups reads every fixture file of dir, checking that each is well formed.
func loadVAPGroups(dir string) ([]*vapGroup, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("no fixtures in %s: %w", dir, err)
	}
	var out []*vapGroup
	names := map[string]string{}
	for _, p := range paths {
		g, err := loadVAPGroup(p)
		if err != nil {
			return nil, fmt.Errorf("fixture %s: %w", p, err)
		}
		// Files run in parallel against one cluster: what they create must not collide.
		for _, key := range g.clusterNames() {
			if other, dup := names[key]; dup {
				return nil, fmt.Errorf("fixture %s: %s is also created by %s", p, key, other)
			}
			names[key] = p
		}
		out = append(out, g)
	}
	return out, nil
}

// clusterNames identifies what the group creates, to detect collisions between files.
func (g *vapGroup) clusterNames() []string {
	out := []string{"ValidatingAdmissionPolicy " + g.policy.Name}
	for _, b := range g.bindings {
		out = append(out, "ValidatingAdmissionPolicyBinding "+b.Name)
	}
	for _, c := range g.crds {
		out = append(out, "CustomResourceDefinition "+c.Name)
	}
	objs := slices.Clone(g.setup)
	for _, c := range g.cases {
		objs = append(objs, c.obj)
	}
	for _, o := range objs {
		out = append(out, fmt.Sprintf("%s %s/%s", o.GroupVersionKind().GroupKind(), o.GetNamespace(), o.GetName()))
	}
	return out
}

func loadVAPGroup(path string) (*vapGroup, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	docs, err := splitYAML(data)
	if err != nil {
		return nil, err
	}
	g := &vapGroup{name: strings.TrimSuffix(filepath.Base(path), ".yaml")}
	var namespaces, others []*unstructured.Unstructured
	seen := map[string]bool{}
	for i, doc := range docs {
		obj, err := decodeObject(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		switch gvk := obj.GroupVersionKind(); {
		case gvk == admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"):
			if g.policy != nil {
				return nil, fmt.Errorf("document %d: a second policy; each file has one", i+1)
			}
			g.policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := yaml.UnmarshalStrict(doc, g.policy); err != nil {
				return nil, fmt.Errorf("document %d: decoding the policy: %w", i+1, err)
			}
		case gvk == admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding"):
			b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			if err := yaml.UnmarshalStrict(doc, b); err != nil {
				return nil, fmt.Errorf("document %d: decoding the binding: %w", i+1, err)
			}
			g.bindings = append(g.bindings, b)
		case gvk == apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"):
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(doc, crd); err != nil {
				return nil, fmt.Errorf("document %d: decoding the CRD: %w", i+1, err)
			}
			g.crds = append(g.crds, crd)
		case obj.GetAnnotations()[vapAnnotationExpect] != "":
			c, err := newVAPCase(obj, g.name)
			if err != nil {
				return nil, fmt.Errorf("document %d (%s): %w", i+1, obj.GetName(), err)
			}
			if seen[c.name] {
				return nil, fmt.Errorf("document %d: case %s repeats a name; name it with %s", i+1, c.name, vapAnnotationCase)
			}
			seen[c.name] = true
			g.cases = append(g.cases, c)
		case gvk == corev1.SchemeGroupVersion.WithKind("Namespace"):
			namespaces = append(namespaces, obj)
		default:
			others = append(others, obj)
		}
	}
	g.setup = append(namespaces, others...)

	switch {
	case g.policy == nil:
		return nil, errors.New("no ValidatingAdmissionPolicy")
	case len(g.bindings) == 0:
		return nil, errors.New("no ValidatingAdmissionPolicyBinding: the apiserver enforces only bound policies")
	case len(g.cases) == 0:
		return nil, fmt.Errorf("no object annotated %s", vapAnnotationExpect)
	}
	for _, b := range g.bindings {
		if b.Spec.PolicyName != g.policy.Name {
			return nil, fmt.Errorf("binding %s binds %q, not the file's policy %q", b.Name, b.Spec.PolicyName, g.policy.Name)
		}
	}
	probes := 0
	for _, c := range g.cases {
		if c.probe != "" {
			probes++
		}
	}
	if probes == 0 {
		return nil, fmt.Errorf("no object annotated %s: nothing shows when the policy is in effect", vapAnnotationProbe)
	}
	return g, nil
}

// newVAPCase reads a compared object and its annotations, and labels it for the file's policy.
func newVAPCase(obj *unstructured.Unstructured, group string) (*vapCase, error) {
	a := obj.GetAnnotations()
	c := &vapCase{
		expect:           a[vapAnnotationExpect],
		verdicts:         a[vapAnnotationVerdicts],
		request:          a[vapAnnotationRequest],
		probe:            a[vapAnnotationProbe],
		obj:              obj,
		apiserverMessage: a[vapAnnotationAPIServerMessage],
	}
	switch c.expect {
	case "deny", "admit", "warn", "error":
	default:
		return nil, fmt.Errorf("%s %q is none of deny, admit, warn, error", vapAnnotationExpect, c.expect)
	}
	switch c.request {
	case "":
		c.request = "create"
	case "create", "update":
	default:
		return nil, fmt.Errorf("%s %q is neither create nor update", vapAnnotationRequest, c.request)
	}
	if c.probe != "" && c.expect != "deny" && c.expect != "error" {
		return nil, fmt.Errorf("a probe must be denied, but the fixture expects %s", c.expect)
	}
	if c.apiserverMessage != "" && c.expect != "deny" && c.expect != "warn" {
		return nil, fmt.Errorf("%s needs a denial or a warning, but the fixture expects %s", vapAnnotationAPIServerMessage, c.expect)
	}
	if c.verdicts != "" && c.verdicts != "none" {
		v := strings.Split(c.verdicts, ",")
		if !slices.IsSorted(v) {
			return nil, fmt.Errorf("%s %q is not sorted", vapAnnotationVerdicts, c.verdicts)
		}
	}
	c.name = a[vapAnnotationCase]
	if c.name == "" {
		c.name = obj.GetKind() + "/" + obj.GetName()
		if ns := obj.GetNamespace(); ns != "" {
			c.name = obj.GetKind() + "/" + ns + "/" + obj.GetName()
		}
	}
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[vapGroupLabel] = group
	obj.SetLabels(l)
	return c, nil
}
