package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/crdrules"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/vap"
)

// The one rule every micro benchmark evaluates, written for each source: a CRD rule at the schema root sees
// the object as self, a ValidatingAdmissionPolicy sees it as object. The message expression only runs when
// the rule fails, as in the apiserver.
const (
	ruleSelf       = "self.spec.replicas <= self.spec.maxReplicas"
	messageSelf    = "'replicas ' + string(self.spec.replicas) + ' exceeds ' + string(self.spec.maxReplicas)"
	ruleObject     = "object.spec.replicas <= object.spec.maxReplicas"
	messageObject  = "'replicas ' + string(object.spec.replicas) + ' exceeds ' + string(object.spec.maxReplicas)"
	wantFailedText = "replicas 7 exceeds 5"
)

var widgetsGVR = schema.GroupVersionResource{Group: "bench.celaudit.io", Version: "v1", Resource: "widgets"}

// cases are the two objects: one satisfying the rule, one breaking it.
var cases = []struct {
	name     string
	replicas int64
	verdict  audit.Verdict
}{
	{"pass", 3, audit.Pass},
	{"fail", 7, audit.Fail},
}

// widget returns the benchmarked object, decoded as the apiserver's JSON decoder does (integers as int64).
func widget(tb testing.TB, replicas int64) *unstructured.Unstructured {
	tb.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(`{"apiVersion":"bench.celaudit.io/v1","kind":"Widget",` +
		`"metadata":{"name":"w","namespace":"bench","uid":"uid-w","labels":{"app":"bench"}},` +
		`"spec":{"replicas":` + itoa(replicas) + `,"maxReplicas":5,"color":"red","owner":"team-a"}}`)); err != nil {
		tb.Fatalf("decoding widget: %v", err)
	}
	return u
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// widgetCRD has one served version whose root carries the single rule.
func widgetCRD(tb testing.TB) *apiextensionsv1.CustomResourceDefinition {
	tb.Helper()
	root := &apiextensionsv1.JSONSchemaProps{}
	if err := yaml.Unmarshal([]byte(`type: object
x-kubernetes-validations:
- rule: "`+ruleSelf+`"
  messageExpression: "`+messageSelf+`"
properties:
  apiVersion: {type: string}
  kind: {type: string}
  metadata: {type: object}
  spec:
    type: object
    required: [replicas, maxReplicas]
    properties:
      replicas: {type: integer}
      maxReplicas: {type: integer}
      color: {type: string}
      owner: {type: string}
`), root); err != nil {
		tb.Fatalf("parsing schema: %v", err)
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.bench.celaudit.io", UID: "crd-uid", Generation: 1},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "bench.celaudit.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: root},
			}},
		},
	}
}

// namespaceGetter serves the one namespace of the benchmark.
type namespaceGetter map[string]*corev1.Namespace

func (n namespaceGetter) Get(name string) (*corev1.Namespace, error) {
	if ns, ok := n[name]; ok {
		return ns, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
}

// vapDeps are the cluster views of the VAP benchmark: discovery serving widgets and namespaces, and the
// object's namespace.
func vapDeps(tb testing.TB) vap.Deps {
	tb.Helper()
	verbs := metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	resolver, err := vap.NewStaticResolver([]*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "namespaces", Kind: "Namespace", Verbs: verbs}}},
		{GroupVersion: "bench.celaudit.io/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: verbs}}},
	})
	if err != nil {
		tb.Fatalf("NewStaticResolver: %v", err)
	}
	return vap.Deps{
		Namespaces: namespaceGetter{"bench": {ObjectMeta: metav1.ObjectMeta{Name: "bench", Labels: map[string]string{"env": "prod"}}}},
		Resolver:   resolver,
	}
}

// widgetPolicy is the single-validation policy on widgets, bound with [Deny] so that a failure is a fail.
func widgetPolicy() (*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas", UID: "uid-replicas", Generation: 1},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{"bench.celaudit.io"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"},
					},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: ruleObject, MessageExpression: messageObject}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "replicas",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding}
}

// checkResults fails unless results hold exactly one result with the wanted verdict and, for a failure,
// the message of the message expression (a CRD prefixes it with the field path, "<nil>" at the root, as
// the apiserver prints it).
func checkResults(tb testing.TB, results []audit.Result, verdict audit.Verdict) {
	tb.Helper()
	if len(results) != 1 || results[0].Verdict != verdict {
		tb.Fatalf("results = %+v, want one %s", results, verdict)
	}
	if verdict == audit.Fail && !strings.HasSuffix(results[0].Message, wantFailedText) {
		tb.Fatalf("message = %q, want %q", results[0].Message, wantFailedText)
	}
}

// BenchmarkCRDRule evaluates one object against a CRD with one x-kubernetes-validations rule: the
// apiserver's schema validation and CEL validator, and turning findings into results.
func BenchmarkCRDRule(b *testing.B) {
	benchmarkPolicy(b, crdrules.Compile(widgetCRD(b), crdrules.Options{}))
}

// BenchmarkVAPValidation evaluates one object against a ValidatingAdmissionPolicy with one validation and one
// binding: matching the policy and binding, the apiserver's validator, and turning decisions into results.
func BenchmarkVAPValidation(b *testing.B) {
	policy, bindings := widgetPolicy()
	benchmarkPolicy(b, vap.CompilePolicy(policy, vap.Options{}).Bind(bindings, vapDeps(b)))
}

// benchmarkPolicy runs p on the widget of each case, after checking that it gives the case's verdict.
func benchmarkPolicy(b *testing.B, p audit.Policy) {
	ctx := context.Background()
	for _, c := range cases {
		obj := widget(b, c.replicas)
		checkResults(b, p.Evaluate(ctx, widgetsGVR, obj), c.verdict)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Evaluate(ctx, widgetsGVR, obj)
			}
		})
	}
}

// celFloor is the rule and its message compiled by bare cel-go, with the object's variable declared dyn.
type celFloor struct {
	rule, message cel.Program
	variable      string
}

func compileFloor(tb testing.TB, variable, rule, message string) celFloor {
	tb.Helper()
	env, err := cel.NewEnv(cel.Variable(variable, cel.DynType))
	if err != nil {
		tb.Fatalf("cel.NewEnv: %v", err)
	}
	program := func(expr string) cel.Program {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			tb.Fatalf("compiling %q: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			tb.Fatalf("program %q: %v", expr, err)
		}
		return prg
	}
	return celFloor{rule: program(rule), message: program(message), variable: variable}
}

// eval runs the rule and, when it is false, the message, as a validator does. It returns the message, "" on
// a pass.
func (f celFloor) eval(activation map[string]any) (string, error) {
	out, _, err := f.rule.Eval(activation)
	if err != nil {
		return "", err
	}
	if out.Value() == true {
		return "", nil
	}
	msg, _, err := f.message.Eval(activation)
	if err != nil {
		return "", err
	}
	s, _ := msg.Value().(string)
	return s, nil
}

// BenchmarkCELFloor is the floor of both sources: bare cel-go evaluating the same expressions on the same
// object, as a map[string]any activation, without Kubernetes' CEL libraries, cost tracking or result building.
func BenchmarkCELFloor(b *testing.B) {
	for _, f := range []celFloor{
		compileFloor(b, "self", ruleSelf, messageSelf),
		compileFloor(b, "object", ruleObject, messageObject),
	} {
		for _, c := range cases {
			activation := map[string]any{f.variable: widget(b, c.replicas).Object}
			msg, err := f.eval(activation)
			if err != nil || (c.verdict == audit.Fail) != (msg != "") || (msg != "" && msg != wantFailedText) {
				b.Fatalf("%s %s: message %q, error %v", f.variable, c.name, msg, err)
			}
			b.Run(f.variable+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := f.eval(activation); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// mapPolicy is a MutatingAdmissionPolicy on resource (group/version/resource) with one ApplyConfiguration
// mutation and one binding.
func mapPolicy(tb testing.TB, group, resource, expression string) (*mutate.Compiled, []*admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	tb.Helper()
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "defaults", UID: "uid-defaults", Generation: 1},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}},
				},
			}}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType:          admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: expression},
			}},
		},
	}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "defaults"},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "defaults"},
	}
	return mutate.Compile(policy), []*admissionregistrationv1.MutatingAdmissionPolicyBinding{binding}
}

// benchDeployment is a stored Deployment (defaulted, as the API server keeps it) with one container.
func benchDeployment(tb testing.TB, pullPolicy string) *unstructured.Unstructured {
	tb.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"bench",` +
		`"uid":"uid-d","generation":1,"labels":{"app":"d"}},"spec":{"replicas":1,"selector":{"matchLabels":{"app":"d"}},` +
		`"template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[{"name":"app","image":"nginx:1.25",` +
		`"imagePullPolicy":"` + pullPolicy + `","resources":{},"terminationMessagePath":"/dev/termination-log",` +
		`"terminationMessagePolicy":"File"}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,` +
		`"dnsPolicy":"ClusterFirst","securityContext":{},"schedulerName":"default-scheduler"}},` +
		`"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%","maxSurge":"25%"}},` +
		`"revisionHistoryLimit":10,"progressDeadlineSeconds":600}}`)); err != nil {
		tb.Fatalf("decoding deployment: %v", err)
	}
	return u
}

// BenchmarkMAPMutation evaluates one object against a MutatingAdmissionPolicy with one ApplyConfiguration
// mutation and one binding: matching, the API server's dispatcher and patcher, the defaults applied after
// the patch and, on drift, the JSON patch of the change. The custom resource is the widget of the other
// benchmarks; the Deployment is a built-in object, admitted through its internal version.
func BenchmarkMAPMutation(b *testing.B) {
	deps := vapDeps(b)
	resolver, err := vap.NewStaticResolver([]*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "namespaces", Kind: "Namespace", Verbs: metav1.Verbs{"list", "watch"}}}},
		{GroupVersion: "bench.celaudit.io/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}}}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	deps.Resolver = resolver
	types := mutate.NewTypes([]*apiextensionsv1.CustomResourceDefinition{widgetCRD(b)})
	deploymentsGVR := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

	blueWidget := widget(b, 3)
	if err := unstructured.SetNestedField(blueWidget.Object, "blue", "spec", "color"); err != nil {
		b.Fatal(err)
	}
	widgetSet := func() *mutate.Set {
		c, bindings := mapPolicy(b, "bench.celaudit.io", "widgets", `Object{spec: Object.spec{color: "red"}}`)
		return mutate.NewSet([]*mutate.Compiled{c}, bindings, types, deps)
	}()
	deploymentSet := func() *mutate.Set {
		c, bindings := mapPolicy(b, "apps", "deployments", `Object{spec: Object.spec{template: Object.spec.template{spec: `+
			`Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "app", imagePullPolicy: "Always"}]}}}}`)
		return mutate.NewSet([]*mutate.Compiled{c}, bindings, types, deps)
	}()
	for _, c := range []struct {
		name    string
		set     *mutate.Set
		gvr     schema.GroupVersionResource
		obj     *unstructured.Unstructured
		verdict audit.Verdict
	}{
		{"crd/pass", widgetSet, widgetsGVR, widget(b, 3), audit.Pass},
		{"crd/drift", widgetSet, widgetsGVR, blueWidget, audit.Warn},
		{"deployment/pass", deploymentSet, deploymentsGVR, benchDeployment(b, "Always"), audit.Pass},
		{"deployment/drift", deploymentSet, deploymentsGVR, benchDeployment(b, "IfNotPresent"), audit.Warn},
	} {
		ctx := context.Background()
		out := c.set.Evaluate(ctx, c.gvr, c.obj)
		if len(out.Results) != 1 || out.Results[0].Verdict != c.verdict || (c.verdict == audit.Warn) != (len(out.Patch) == 1) {
			b.Fatalf("%s: outcome %+v, want one %s result", c.name, out, c.verdict)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.set.Evaluate(ctx, c.gvr, c.obj)
			}
		})
	}
}
