package engine

import (
	"context"
	"encoding/base64"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/vap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var (
	secrets    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// fakePolicy evaluates with a function.
type fakePolicy struct {
	name      string
	resources []schema.GroupVersionResource
	eval      func(obj *unstructured.Unstructured) []audit.Result
}

func (p fakePolicy) Key() audit.PolicyKey { return audit.VAPKey(p.name) }
func (p fakePolicy) Resources() []schema.GroupVersionResource {
	return p.resources
}
func (p fakePolicy) Evaluate(_ context.Context, _ schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	return p.eval(obj)
}

// quoting copies a Secret's password, as stored and decoded, into its result: a policy that fails to
// withhold what it reads.
func quoting(name string) fakePolicy {
	return fakePolicy{name: name, resources: []schema.GroupVersionResource{secrets, configMaps}, eval: func(obj *unstructured.Unstructured) []audit.Result {
		stored, _, _ := unstructured.NestedString(obj.Object, "data", "password")
		decoded, _ := base64.StdEncoding.DecodeString(stored)
		return []audit.Result{{
			Policy:     name,
			Verdict:    audit.Fail,
			Message:    fmt.Sprintf("stored %s, decoded %s", stored, decoded),
			Properties: map[string]string{"quoted": string(decoded)},
			Resource:   audit.RefOf(obj),
		}}
	}}
}

func object(kind string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": kind,
		"metadata": map[string]any{"name": "o", "namespace": "n", "uid": "u"},
		"data":     data,
	}}
}

func TestEvaluate(t *testing.T) {
	password := base64.StdEncoding.EncodeToString([]byte("hunter22"))
	ref := audit.ObjectRef{APIVersion: "v1", Kind: "Secret", Namespace: "n", Name: "o", UID: "u"}
	cases := []struct {
		name   string
		policy audit.Policy
		gvr    schema.GroupVersionResource
		obj    *unstructured.Unstructured
		want   []audit.Result
	}{
		{
			name:   "a Secret's values never reach a result",
			policy: quoting("q"),
			gvr:    secrets,
			obj:    object("Secret", map[string]any{"password": password}),
			want: []audit.Result{{
				Policy: "q", PolicySource: audit.SourceVAP, Verdict: audit.Fail, Message: "stored [redacted], decoded [redacted]",
				Properties: map[string]string{"quoted": "[redacted]"}, Resource: ref,
			}},
		},
		{
			name:   "other objects are not redacted",
			policy: quoting("q"),
			gvr:    configMaps,
			obj:    object("ConfigMap", map[string]any{"password": password}),
			want: []audit.Result{{
				Policy: "q", PolicySource: audit.SourceVAP, Verdict: audit.Fail, Message: "stored " + password + ", decoded hunter22",
				Properties: map[string]string{"quoted": "hunter22"},
				Resource:   audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "n", Name: "o", UID: "u"},
			}},
		},
		{
			name: "a panic becomes an error result of the policy",
			policy: fakePolicy{name: "p", resources: []schema.GroupVersionResource{secrets}, eval: func(*unstructured.Unstructured) []audit.Result {
				panic("boom")
			}},
			gvr: secrets,
			obj: object("Secret", nil),
			want: []audit.Result{{
				Policy: "p", PolicySource: audit.SourceVAP, Rule: audit.RuleInternal, Verdict: audit.Error, Message: "internal error evaluating the policy: boom", Resource: ref,
			}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NewObject(c.gvr, c.obj).Evaluate(context.Background(), c.policy); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Evaluate =\n%+v\nwant\n%+v", got, c.want)
			}
		})
	}
}

// evaluate evaluates obj, read at gvr, with every policy of s covering it, as the front ends do.
func evaluate(s *Set, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	o := NewObject(gvr, obj)
	var out []audit.Result
	for _, p := range s.For(gvr) {
		out = append(out, o.Evaluate(context.Background(), p)...)
	}
	return out
}

// TestSet checks which policies a set, and the sets With and Without derive from it, give for a resource.
func TestSet(t *testing.T) {
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	policy := func(name string, resources ...schema.GroupVersionResource) fakePolicy {
		return fakePolicy{name: name, resources: resources, eval: func(obj *unstructured.Unstructured) []audit.Result {
			return []audit.Result{{Policy: name, Verdict: audit.Pass, Resource: audit.RefOf(obj)}}
		}}
	}
	a := policy("a", configMaps, secrets)
	b := policy("b", configMaps)
	base := NewSet(b, a)
	cases := []struct {
		name string
		set  *Set
		// want lists, per resource, the names of the policies covering it, in key order.
		want map[schema.GroupVersionResource][]string
	}{
		{"built", base, map[schema.GroupVersionResource][]string{configMaps: {"a", "b"}, secrets: {"a"}}},
		{"another policy", base.With(policy("c", deployments, configMaps)),
			map[schema.GroupVersionResource][]string{configMaps: {"a", "b", "c"}, secrets: {"a"}, deployments: {"c"}}},
		{"a policy replaced by one covering other resources", base.With(policy("a", deployments)),
			map[schema.GroupVersionResource][]string{configMaps: {"b"}, deployments: {"a"}}},
		{"a policy removed", base.Without(a.Key()), map[schema.GroupVersionResource][]string{configMaps: {"b"}}},
		{"every policy removed", base.Without(a.Key()).Without(b.Key()), map[schema.GroupVersionResource][]string{}},
		{"base unchanged by what was derived from it", base,
			map[schema.GroupVersionResource][]string{configMaps: {"a", "b"}, secrets: {"a"}}},
		{"two policies of one key both kept", NewSet(b, policy("b", secrets)),
			map[schema.GroupVersionResource][]string{configMaps: {"b"}, secrets: {"b"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var resources []schema.GroupVersionResource
			for _, gvr := range []schema.GroupVersionResource{configMaps, secrets, deployments} { // sorted: the core group first
				if _, ok := c.want[gvr]; ok {
					resources = append(resources, gvr)
				}
			}
			if got := c.set.Resources(); !reflect.DeepEqual(got, resources) {
				t.Errorf("Resources() = %v, want %v", got, resources)
			}
			for _, gvr := range []schema.GroupVersionResource{deployments, configMaps, secrets} {
				var names []string
				for _, r := range evaluate(c.set, gvr, object("ConfigMap", nil)) {
					names = append(names, r.Policy)
				}
				if !reflect.DeepEqual(names, c.want[gvr]) {
					t.Errorf("policies evaluated at %s: %v, want %v", gvr.Resource, names, c.want[gvr])
				}
				for _, name := range []string{"a", "b", "c"} {
					want := slices.Contains(c.want[gvr], name)
					if got := c.set.Covers(audit.VAPKey(name), gvr); got != want {
						t.Errorf("Covers(%s, %s) = %v, want %v", name, gvr.Resource, got, want)
					}
				}
			}
		})
	}
}

func TestCompileObjects(t *testing.T) {
	vapObj := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
			"metadata": map[string]any{"name": name}, "spec": spec,
		}}
	}
	crdObj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.com"},
		"spec": map[string]any{
			"group": "example.com", "scope": "Namespaced",
			"names":    map[string]any{"kind": "Widget", "plural": "widgets"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true, "schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object"}}}},
		},
	}}
	valid := vapObj("b", map[string]any{"validations": []any{map[string]any{"expression": "true"}}})
	other := object("ConfigMap", nil)

	policies, err := Compiler{}.Compile([]*unstructured.Unstructured{valid, other, crdObj}, Views{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, p := range policies {
		keys = append(keys, p.Key().String())
	}
	if want := []string{"crd/widgets.example.com", "vap/b"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("compiled %v, want %v", keys, want)
	}

	bad := vapObj("broken", map[string]any{"validations": "not a list"})
	if _, err := (Compiler{}).Compile([]*unstructured.Unstructured{valid, bad}, Views{}); err == nil ||
		!strings.Contains(err.Error(), `ValidatingAdmissionPolicy "broken"`) {
		t.Errorf("a policy that does not decode: error %v, want one naming it", err)
	}
}

// panickingEvaluation stands for upstream code that panics on an object: an index out of range.
func panickingEvaluation(obj *unstructured.Unstructured) []audit.Result {
	var names []string
	_ = names[len(obj.GetName())]
	return nil
}

// recordedPanic is one call of a PanicHandler.
type recordedPanic struct {
	policy audit.PolicyKey
	obj    audit.ObjectRef
	value  string
	stack  string
}

// TestEvaluatePanicIsReportedWithStack evaluates an object with a policy whose evaluation panics in the
// code it calls, then with a policy that does not: the first gives one error result saying what panicked,
// the panic handler of the context gets its stack, which names the function that panicked, and the second
// policy is evaluated as usual.
func TestEvaluatePanicIsReportedWithStack(t *testing.T) {
	ref := audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "n", Name: "o", UID: "u"}
	var got []recordedPanic
	ctx := audit.WithPanicHandler(context.Background(), func(policy audit.PolicyKey, obj audit.ObjectRef, value any, stack []byte) {
		got = append(got, recordedPanic{policy: policy, obj: obj, value: fmt.Sprint(value), stack: string(stack)})
	})
	o := NewObject(configMaps, object("ConfigMap", nil))
	panicking := fakePolicy{name: "panics", resources: []schema.GroupVersionResource{configMaps}, eval: panickingEvaluation}
	res := o.Evaluate(ctx, panicking)
	want := []audit.Result{{
		Policy: "panics", PolicySource: audit.SourceVAP, Rule: audit.RuleInternal, Verdict: audit.Error,
		Message: "internal error evaluating the policy: runtime error: index out of range [1] with length 0", Resource: ref,
	}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Evaluate =\n%+v\nwant\n%+v", res, want)
	}
	if len(got) != 1 {
		t.Fatalf("the panic handler was called %d times, want once", len(got))
	}
	if got[0].policy != audit.VAPKey("panics") || got[0].obj != ref || got[0].value != "runtime error: index out of range [1] with length 0" {
		t.Errorf("the panic handler got %+v", got[0])
	}
	if !strings.Contains(got[0].stack, "engine.panickingEvaluation") {
		t.Errorf("the stack does not name the function that panicked:\n%s", got[0].stack)
	}

	passing := fakePolicy{name: "passes", resources: []schema.GroupVersionResource{configMaps}, eval: func(obj *unstructured.Unstructured) []audit.Result {
		return []audit.Result{{Policy: "passes", Verdict: audit.Pass, Resource: audit.RefOf(obj)}}
	}}
	res = o.Evaluate(ctx, passing)
	if len(res) != 1 || res[0].Verdict != audit.Pass || len(got) != 1 {
		t.Errorf("the policy after the panicking one gave %+v (%d panics reported)", res, len(got))
	}
}

// TestCompileMAPs compiles MutatingAdmissionPolicies with their bindings and the CRD of the custom resources
// they change, all given as objects, and evaluates a custom resource as front ends do: one result per policy
// that applies, the drifted one a warn with its patch, keyed as MutatingAdmissionPolicies.
func TestCompileMAPs(t *testing.T) {
	docs := []string{`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              tier: {type: string, default: bronze}
`, `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: size, annotations: {celaudit.io/severity: high}}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [example.com], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [widgets]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{spec: Object.spec{size: 3}}'
`, `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: size}
spec: {policyName: size}
`, `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: unbound}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [example.com], apiVersions: [v1], operations: [UPDATE], resources: [widgets]}
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: '[]'}
`}
	var objs []*unstructured.Unstructured
	for _, doc := range docs {
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	resolver, err := vap.NewStaticResolver([]*metav1.APIResourceList{{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
		{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: metav1.Verbs{"get", "list", "watch", "create", "update", "patch", "delete"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	policies, err := Compiler{}.Compile(objs, Views{Resources: resolver, Namespaces: defaultNamespace{}})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, p := range policies {
		keys = append(keys, p.Key().String())
	}
	// The unbound policy is not applied, as on the API server.
	if want := []string{"crd/widgets.example.com", "map/size"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("compiled %v, want %v", keys, want)
	}
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	if got := policies[1].Resources(); !reflect.DeepEqual(got, []schema.GroupVersionResource{widgets}) {
		t.Errorf("map/size reads %v, want widgets", got)
	}
	widget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "default", "uid": "u1", "resourceVersion": "3"},
		"spec":     map[string]any{"size": int64(1), "tier": "bronze"},
	}}
	res := NewObject(widgets, widget).Evaluate(context.Background(), policies[1])
	if len(res) != 1 {
		t.Fatalf("results %+v, want one", res)
	}
	r := res[0]
	if r.Policy != "size" || r.PolicySource != audit.SourceMAP || r.Verdict != audit.Warn || r.Severity != audit.SeverityHigh ||
		r.Properties[mutate.PropPatch] != `[{"op":"replace","path":"/spec/size","value":3}]` {
		t.Errorf("result %+v, want a high warn with the patch of spec.size", r)
	}
}

// defaultNamespace serves the namespace "default" alone.
type defaultNamespace struct{}

func (defaultNamespace) Get(name string) (*corev1.Namespace, error) {
	if name != metav1.NamespaceDefault {
		return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
}
