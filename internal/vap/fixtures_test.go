package vap

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
)

// Resources of the test cluster.
var (
	podsGVR            = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	namespacesGVR      = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	deploymentsGVR     = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	widgetsV1GVR       = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	widgetsV1beta1GVR  = schema.GroupVersionResource{Group: "example.com", Version: "v1beta1", Resource: "widgets"}
	coreEventsGVR      = schema.GroupVersionResource{Version: "v1", Resource: "events"}
	eventsGVR          = schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}
	nodesGVR           = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	configMapsGVR      = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secretsGVR         = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	configMapGVK       = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	limitsGVK          = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Limits"}
	clusterLimitsGVK   = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "ClusterLimits"}
	listVerbs          = metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	defaultTestContext = context.Background()
)

// discovery is the test cluster's discovery output, preferred versions first.
func discovery() []*metav1.APIResourceList {
	return []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: listVerbs},
			{Name: "pods/status", Kind: "Pod", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
			{Name: "pods/exec", Kind: "PodExecOptions", Namespaced: true, Verbs: metav1.Verbs{"create", "get"}},
			{Name: "namespaces", Kind: "Namespace", Verbs: listVerbs},
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: listVerbs},
			{Name: "secrets", Kind: "Secret", Namespaced: true, Verbs: listVerbs},
			{Name: "events", Kind: "Event", Namespaced: true, Verbs: listVerbs},
			{Name: "nodes", Kind: "Node", Verbs: listVerbs},
			{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: metav1.Verbs{"create"}},
			{Name: "componentstatuses", Kind: "ComponentStatus", Verbs: metav1.Verbs{"get", "list"}},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: listVerbs},
			{Name: "deployments/scale", Kind: "Scale", Group: "autoscaling", Version: "v1", Namespaced: true, Verbs: metav1.Verbs{"get", "update"}},
		}},
		{GroupVersion: "events.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "events", Kind: "Event", Namespaced: true, Verbs: listVerbs},
		}},
		{GroupVersion: "admissionregistration.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "validatingadmissionpolicies", Kind: "ValidatingAdmissionPolicy", Verbs: listVerbs},
		}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: listVerbs},
			{Name: "limits", Kind: "Limits", Namespaced: true, Verbs: listVerbs},
			{Name: "clusterlimits", Kind: "ClusterLimits", Verbs: listVerbs},
		}},
		{GroupVersion: "wgpolicyk8s.io/v1alpha2", APIResources: []metav1.APIResource{
			{Name: "policyreports", Kind: "PolicyReport", Namespaced: true, Verbs: listVerbs},
			{Name: "clusterpolicyreports", Kind: "ClusterPolicyReport", Verbs: listVerbs},
		}},
		{GroupVersion: "example.com/v1beta1", APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: listVerbs},
		}},
	}
}

func testResolver(t testing.TB) *StaticResolver {
	t.Helper()
	r, err := NewStaticResolver(discovery())
	if err != nil {
		t.Fatalf("NewStaticResolver: %v", err)
	}
	return r
}

// namespaces is a NamespaceGetter over namespaces by name.
type namespaces map[string]*corev1.Namespace

func (n namespaces) Get(name string) (*corev1.Namespace, error) {
	if ns, ok := n[name]; ok {
		return ns, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
}

func testNamespaces() namespaces {
	return namespaces{
		"default": newNamespace("default", nil),
		"prod":    newNamespace("prod", map[string]string{"env": "prod"}),
		"dev":     newNamespace("dev", map[string]string{"env": "dev"}),
	}
}

func newNamespace(name string, lbls map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls, Annotations: map[string]string{"team": name + "-team"}}}
}

// params is a ParamSource over objects by kind, returned in reverse order of namespace/name so that tests
// show the evaluation sorting them.
type params map[schema.GroupVersionKind][]runtime.Object

func (p params) Get(gvk schema.GroupVersionKind, namespace, name string) (runtime.Object, error) {
	for _, o := range p[gvk] {
		m, _ := meta.Accessor(o)
		if m.GetNamespace() == namespace && m.GetName() == name {
			return o, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind)}, name)
}

func (p params) List(gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]runtime.Object, error) {
	var out []runtime.Object
	for _, o := range p[gvk] {
		m, _ := meta.Accessor(o)
		if (namespace == "" || m.GetNamespace() == namespace) && selector.Matches(labels.Set(m.GetLabels())) {
			out = append(out, o)
		}
	}
	slices.Reverse(out)
	return out, nil
}

// failingParams fails every read.
type failingParams struct{ err error }

func (f failingParams) Get(schema.GroupVersionKind, string, string) (runtime.Object, error) {
	return nil, f.err
}
func (f failingParams) List(schema.GroupVersionKind, string, labels.Selector) ([]runtime.Object, error) {
	return nil, f.err
}

// panickingParams panics on every read, as a buggy cache might.
type panickingParams struct{}

func (panickingParams) Get(schema.GroupVersionKind, string, string) (runtime.Object, error) {
	panic("boom")
}
func (panickingParams) List(schema.GroupVersionKind, string, labels.Selector) ([]runtime.Object, error) {
	panic("boom")
}

func testParams() params {
	return params{
		limitsGVK: {
			newObject("example.com/v1", "Limits", "prod", "strict", withLabels(map[string]string{"tier": "limits"}), withField(int64(2), "spec", "maxReplicas")),
			newObject("example.com/v1", "Limits", "prod", "loose", withLabels(map[string]string{"tier": "limits"}), withField(int64(10), "spec", "maxReplicas")),
			newObject("example.com/v1", "Limits", "dev", "strict", withLabels(map[string]string{"tier": "limits"}), withField(int64(1), "spec", "maxReplicas")),
		},
		clusterLimitsGVK: {
			newObject("example.com/v1", "ClusterLimits", "", "global", withField(int64(4), "spec", "maxReplicas")),
		},
		configMapGVK: {
			// Typed, without TypeMeta, as a client-go lister returns it.
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "limits"}, Data: map[string]string{"maxReplicas": "3"}},
		},
	}
}

func testDeps(t testing.TB) Deps {
	return Deps{Namespaces: testNamespaces(), Params: testParams(), Resolver: testResolver(t)}
}

// Objects.

type objectOption func(*unstructured.Unstructured)

func newObject(apiVersion, kind, namespace, name string, opts ...objectOption) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetUID(types.UID("uid-" + name))
	for _, o := range opts {
		o(u)
	}
	return u
}

func withLabels(l map[string]string) objectOption {
	return func(u *unstructured.Unstructured) { u.SetLabels(l) }
}

func withField(value any, path ...string) objectOption {
	return func(u *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(u.Object, value, path...); err != nil {
			panic(err)
		}
	}
}

func newDeployment(namespace, name string, replicas int64, opts ...objectOption) *unstructured.Unstructured {
	return newObject("apps/v1", "Deployment", namespace, name, append([]objectOption{withField(replicas, "spec", "replicas")}, opts...)...)
}

// Policies.

type policyOption func(*admissionregistrationv1.ValidatingAdmissionPolicy)

// newPolicy returns an undefaulted policy (as unit tests write them) matching CREATE and UPDATE of
// apps/v1 deployments unless options say otherwise.
func newPolicy(name string, opts ...policyOption) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule("apps", "v1", "deployments")},
			},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func rule(group, version, resource string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.NamedRuleWithOperations {
	if len(ops) == 0 {
		ops = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	}
	return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource},
		},
	}}
}

func withRules(rules ...admissionregistrationv1.NamedRuleWithOperations) policyOption {
	return func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.MatchConstraints.ResourceRules = rules
	}
}

func withMatchConstraints(f func(*admissionregistrationv1.MatchResources)) policyOption {
	return func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { f(p.Spec.MatchConstraints) }
}

func withValidation(expression string, opts ...func(*admissionregistrationv1.Validation)) policyOption {
	return func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		v := admissionregistrationv1.Validation{Expression: expression}
		for _, o := range opts {
			o(&v)
		}
		p.Spec.Validations = append(p.Spec.Validations, v)
	}
}

func message(m string) func(*admissionregistrationv1.Validation) {
	return func(v *admissionregistrationv1.Validation) { v.Message = m }
}

func messageExpression(m string) func(*admissionregistrationv1.Validation) {
	return func(v *admissionregistrationv1.Validation) { v.MessageExpression = m }
}

func reason(r metav1.StatusReason) func(*admissionregistrationv1.Validation) {
	return func(v *admissionregistrationv1.Validation) { v.Reason = &r }
}

func withVariable(name, expression string) policyOption {
	return func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.Variables = append(p.Spec.Variables, admissionregistrationv1.Variable{Name: name, Expression: expression})
	}
}

func withMatchCondition(name, expression string) policyOption {
	return func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.MatchConditions = append(p.Spec.MatchConditions, admissionregistrationv1.MatchCondition{Name: name, Expression: expression})
	}
}

func withAuditAnnotation(key, valueExpression string) policyOption {
	return func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.AuditAnnotations = append(p.Spec.AuditAnnotations, admissionregistrationv1.AuditAnnotation{Key: key, ValueExpression: valueExpression})
	}
}

func withFailurePolicy(f admissionregistrationv1.FailurePolicyType) policyOption {
	return func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Spec.FailurePolicy = &f }
}

func withParamKind(gvk schema.GroupVersionKind) policyOption {
	return func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}
	}
}

// Bindings.

type bindingOption func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)

// newBinding returns an undefaulted binding of policy with validationActions [Deny] unless options say otherwise.
func newBinding(name, policy string, opts ...bindingOption) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	for _, o := range opts {
		o(b)
	}
	return b
}

func withActions(actions ...admissionregistrationv1.ValidationAction) bindingOption {
	return func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) { b.Spec.ValidationActions = actions }
}

func withMatchResources(f func(*admissionregistrationv1.MatchResources)) bindingOption {
	return func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		if b.Spec.MatchResources == nil {
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{}
		}
		f(b.Spec.MatchResources)
	}
}

func withParamRef(f func(*admissionregistrationv1.ParamRef)) bindingOption {
	return func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		b.Spec.ParamRef = &admissionregistrationv1.ParamRef{}
		f(b.Spec.ParamRef)
	}
}

func notFound(a admissionregistrationv1.ParameterNotFoundActionType) func(*admissionregistrationv1.ParamRef) {
	return func(r *admissionregistrationv1.ParamRef) { r.ParameterNotFoundAction = &a }
}

func selector(s map[string]string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: s}
}

// Results.

// row is the part of a result tests compare: everything but the fields every result of a policy shares.
type row struct {
	Rule    string
	Verdict audit.Verdict
	Message string
	Props   map[string]string
}

func (r row) String() string {
	keys := slices.Sorted(maps.Keys(r.Props))
	var b strings.Builder
	fmt.Fprintf(&b, "{%s %s %q", r.Rule, r.Verdict, r.Message)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, r.Props[k])
	}
	return b.String() + "}"
}

func rows(results []audit.Result) []row {
	out := make([]row, len(results))
	for i, r := range results {
		out[i] = row{Rule: ruleBase(r), Verdict: r.Verdict, Message: r.Message, Props: r.Properties}
	}
	return out
}

// ruleBase is the rule name of r without the qualifiers its properties call for (see ruleName): rows state the
// binding, param and pod template once, as properties. A name without them, or with others, is kept whole,
// and differs from every row.
func ruleBase(r audit.Result) string {
	var qualifiers []string
	if b := r.Properties[audit.PropBinding]; b != "" {
		qualifiers = append(qualifiers, "binding "+b)
	}
	if p := r.Properties[audit.PropParam]; p != "" {
		qualifiers = append(qualifiers, "param "+p)
	}
	if r.Properties[audit.PropPodTemplate] == "true" {
		qualifiers = append(qualifiers, "pod template")
	}
	if len(qualifiers) == 0 {
		return r.Rule
	}
	suffix := " (" + strings.Join(qualifiers, ", ") + ")"
	if base, ok := strings.CutSuffix(r.Rule, suffix); ok {
		return base
	}
	return r.Rule
}

func diffRows(t *testing.T, got []audit.Result, want []row) {
	t.Helper()
	g := rows(got)
	if slices.EqualFunc(g, want, func(a, b row) bool { return a.String() == b.String() }) {
		return
	}
	var b strings.Builder
	b.WriteString("results differ\n got:\n")
	for _, r := range g {
		b.WriteString("  " + r.String() + "\n")
	}
	b.WriteString(" want:\n")
	for _, r := range want {
		b.WriteString("  " + r.String() + "\n")
	}
	t.Error(b.String())
}

// props builds a property map from key, value pairs.
func props(kv ...string) map[string]string {
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// denyProps are the properties of a result of binding "b" with validationActions [Deny] on CREATE.
func denyProps(kv ...string) map[string]string {
	return props(append([]string{audit.PropBinding, "b", audit.PropValidationActions, "Deny", audit.PropOperation, "CREATE"}, kv...)...)
}
