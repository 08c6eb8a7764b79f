package vap

import (
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/celaudit/celaudit/internal/audit"
)

// fuzzPolicies are the fixed policies FuzzEvaluate evaluates arbitrary widgets with, each with its bindings:
// a plain validation whose verdict the test can tell from the object; variables, a matchCondition, a
// messageExpression and an audit annotation under Warn and Audit; params from a ConfigMap; and a
// namespaceObject read under a namespace selector.
func fuzzPolicies() map[string]struct {
	policy   *admissionregistrationv1.ValidatingAdmissionPolicy
	bindings bindings
} {
	widgets := withRules(rule("example.com", "v1", "widgets"))
	out := map[string]struct {
		policy   *admissionregistrationv1.ValidatingAdmissionPolicy
		bindings bindings
	}{}
	add := func(p *admissionregistrationv1.ValidatingAdmissionPolicy, bs ...*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		out[p.Name] = struct {
			policy   *admissionregistrationv1.ValidatingAdmissionPolicy
			bindings bindings
		}{p, bs}
	}
	add(newPolicy("replicas", widgets, withValidation("object.spec.replicas < 3", message("too many replicas"))),
		newBinding("b", "replicas"))
	add(newPolicy("expressions", widgets,
		withVariable("items", "has(object.spec) && has(object.spec.items) ? object.spec.items : []"),
		withMatchCondition("not-skipped", "!has(object.metadata.labels) || !('skip' in object.metadata.labels)"),
		withValidation("object.metadata.name.size() < 12", messageExpression("'name ' + object.metadata.name + ' is too long'")),
		withValidation("variables.items.all(i, i.name.startsWith('a'))", message("items start with a")),
		withValidation("!has(object.spec.mode) || object.spec.mode in ['a', 'b']", reason("Forbidden")),
		withAuditAnnotation("replicas", "has(object.spec.replicas) ? string(object.spec.replicas) : 'none'"),
	), newBinding("warn", "expressions", withActions(admissionregistrationv1.Warn)),
		newBinding("audit", "expressions", withActions(admissionregistrationv1.Audit)))
	add(newPolicy("params", widgets, withParamKind(configMapGVK),
		withValidation("int(params.data.maxReplicas) >= object.spec.replicas", messageExpression("'at most ' + params.data.maxReplicas")),
	), newBinding("b", "params", withParamRef(func(r *admissionregistrationv1.ParamRef) { r.Name, r.Namespace = "limits", "prod" })))
	add(newPolicy("namespaces", widgets,
		withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
			m.NamespaceSelector = selector(map[string]string{"env": "prod"})
		}),
		withValidation("namespaceObject.metadata.annotations.team == 'prod-team' && object.metadata.namespace == 'prod'"),
	), newBinding("b", "namespaces"))
	return out
}

// replicasVerdict is the verdict of object.spec.replicas < 3 under Deny on obj, computed from the object, and
// false when the test cannot tell (a number that is not an integer).
func replicasVerdict(obj *unstructured.Unstructured) (audit.Verdict, bool) {
	spec, ok := obj.Object["spec"].(map[string]any)
	if !ok {
		return audit.Error, true // no spec, or one that has no fields: no such key
	}
	switch r := spec["replicas"].(type) {
	case int64:
		if r < 3 {
			return audit.Pass, true
		}
		return audit.Fail, true
	case float64:
		return "", false // compared across types by CEL
	}
	return audit.Error, true // missing, or no overload of < for it
}

// FuzzEvaluate evaluates arbitrary widgets (any JSON object, read at example.com/v1 widgets) with fixed
// policies and checks that the results are values: no panic, known verdicts, a message on every result that
// is not a pass, the policy's name and the object's reference on each, rules distinct per object, the object
// left as it was, and the same results a second time; and that the plain validation decides what the object
// says.
func FuzzEvaluate(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"prod"},"spec":{"replicas":1}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a-very-long-name","namespace":"prod","labels":{"x":"y"}},"spec":{"replicas":7,"mode":"c","items":[{"name":"a1"},{"name":"b1"}]}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"dev","labels":{"skip":""}},"spec":{"replicas":"three"}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"nowhere"},"spec":{"replicas":2.5,"items":"not a list"}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"items":[{"noname":true}],"mode":null}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":5,"namespace":["prod"]},"spec":[]}`,
		`{"kind":"Widget","metadata":{"name":"w","namespace":"prod"},"spec":{"replicas":9223372036854775807}}`,
		`{"metadata":{},"spec":{"replicas":-9223372036854775808,"items":[]}}`,
		`{}`,
	} {
		f.Add([]byte(seed))
	}
	deps := testDeps(f)
	type compiled struct {
		name   string
		policy *Policy
	}
	var policies []compiled
	for name, p := range fuzzPolicies() {
		c := CompilePolicy(p.policy, Options{})
		if problems := c.Problems(); problems != nil {
			f.Fatalf("policy %s does not compile: %v", name, problems)
		}
		policies = append(policies, compiled{name, c.Bind(p.bindings, deps)})
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// Decoded as the unstructured decoder decodes (integers as int64), but kept without apiVersion or kind.
		var m map[string]any
		if err := utiljson.Unmarshal(body, &m); err != nil || m == nil {
			return // not a JSON object
		}
		obj := &unstructured.Unstructured{Object: m}
		before := obj.DeepCopy()
		// Results name the object with the kind it was read as when it carries none.
		ref := audit.RefOf(obj)
		if obj.GroupVersionKind().Empty() {
			ref.APIVersion, ref.Kind = "example.com/v1", "Widget"
		}
		for _, p := range policies {
			results := p.policy.Evaluate(defaultTestContext, widgetsV1GVR, obj)
			if !reflect.DeepEqual(obj.Object, before.Object) {
				t.Fatalf("policy %s modified the object:\n got %#v\nwant %#v", p.name, obj.Object, before.Object)
			}
			rules := map[string]bool{}
			for _, r := range results {
				switch r.Verdict {
				case audit.Pass, audit.Fail, audit.Warn, audit.Error, audit.Skip:
				default:
					t.Fatalf("policy %s: result with verdict %q: %+v", p.name, r.Verdict, r)
				}
				if r.Verdict != audit.Pass && r.Message == "" {
					t.Fatalf("policy %s: %s result without a message: %+v", p.name, r.Verdict, r)
				}
				if r.Policy != p.name || r.Resource != ref || r.Rule == "" {
					t.Fatalf("policy %s: result %+v: want the policy's name, resource %+v and a rule", p.name, r, ref)
				}
				if rules[r.Rule] {
					t.Fatalf("policy %s: two results of rule %q: %v", p.name, r.Rule, results)
				}
				rules[r.Rule] = true
			}
			if again := p.policy.Evaluate(defaultTestContext, widgetsV1GVR, obj); !reflect.DeepEqual(again, results) {
				t.Fatalf("policy %s: evaluated twice:\n%v\n%v", p.name, results, again)
			}
			// An object read at widgets is a Widget of example.com/v1, or carries no kind at all.
			if gvk := obj.GroupVersionKind(); p.name != "replicas" || !gvk.Empty() && gvk != widgetsV1GVR.GroupVersion().WithKind("Widget") {
				continue
			}
			want, known := replicasVerdict(obj)
			if ns := obj.GetNamespace(); ns != "" && testNamespaces()[ns] == nil {
				// namespaceObject is read before any rule, as the API server reads it: an error.
				want, known = audit.Error, true
			}
			if known {
				if len(results) != 1 || results[0].Verdict != want {
					t.Fatalf("object %s: results %v, want one %s", body, results, want)
				}
			}
		}
	})
}
