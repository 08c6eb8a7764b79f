package crdrules

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/celaudit/celaudit/internal/audit"
)

// fuzzSchemas are the fixed schemas FuzzFindings validates arbitrary objects against: every kind of node that
// carries rules (object, list items, a list of type map, map values, int-or-string, preserved unknown fields,
// an embedded resource, the root with metadata), rules with messages, messageExpressions, fieldPath and
// reason, a transition rule, and the OpenAPI checks whose errors keep the rules from running (enum,
// maxLength, maxItems, required, types).
var fuzzSchemas = []string{
	specSchema(`type: object
x-kubernetes-validations:
- rule: "!has(self.min) || !has(self.max) || self.min <= self.max"
  message: min must not exceed max
- rule: "!has(self.mode) || self.mode != 'strict' || has(self.owner)"
  messageExpression: "'mode ' + self.mode + ' needs an owner'"
- rule: "self == oldSelf"
  message: spec is immutable
properties:
  min: {type: integer, minimum: 0}
  max: {type: integer, maximum: 1000}
  ratio: {type: number}
  mode: {type: string, enum: [strict, lax]}
  owner: {type: string, maxLength: 20, pattern: "^[a-z]+$"}
  when: {type: string, format: date-time}
  tags:
    type: array
    maxItems: 10
    x-kubernetes-list-type: set
    items: {type: string, maxLength: 30}
    x-kubernetes-validations:
    - rule: "self.all(t, t.size() < 10)"
      message: tags are short
  ports:
    type: array
    maxItems: 20
    x-kubernetes-list-type: map
    x-kubernetes-list-map-keys: [name]
    items:
      type: object
      required: [name]
      properties:
        name: {type: string, maxLength: 15}
        port: {type: integer}
      x-kubernetes-validations:
      - rule: "!has(self.port) || (self.port > 0 && self.port < 65536)"
        fieldPath: .port
        reason: FieldValueForbidden
  labels:
    type: object
    maxProperties: 10
    additionalProperties: {type: string, maxLength: 63}
    x-kubernetes-validations:
    - rule: "self.all(k, k.startsWith('x') || self[k] == '')"
  size:
    x-kubernetes-int-or-string: true
    x-kubernetes-validations:
    - rule: "type(self) == int ? self > 0 : self.endsWith('Gi')"
  extra:
    type: object
    x-kubernetes-preserve-unknown-fields: true
    properties:
      forbidden: {type: boolean}
    x-kubernetes-validations:
    - rule: "!has(self.forbidden) || !self.forbidden"
  matrix:
    type: array
    maxItems: 5
    items:
      type: array
      maxItems: 5
      items:
        type: integer
        x-kubernetes-validations:
        - rule: "self >= 0"
`),
	`type: object
x-kubernetes-validations:
- rule: "self.metadata.name.startsWith('w')"
  messageExpression: "'name ' + self.metadata.name + ' must start with w'"
- rule: "!has(self.spec) || !has(self.spec.template) || self.spec.template.kind == 'ConfigMap'"
properties:
  apiVersion: {type: string}
  kind: {type: string}
  metadata: {type: object}
  spec:
    type: object
    required: [replicas]
    properties:
      replicas: {type: integer, format: int32}
      template:
        type: object
        x-kubernetes-embedded-resource: true
        x-kubernetes-preserve-unknown-fields: true
        properties:
          data:
            type: object
            additionalProperties: {type: string}
        x-kubernetes-validations:
        - rule: "!has(self.data) || size(self.data) < 3"
  status:
    type: object
    properties:
      phase: {type: string}
    x-kubernetes-validations:
    - rule: "!has(self.phase) || self.phase in ['Ready', 'Pending']"
`,
}

// errorValidator is what the apiserver's CRD strategy offers for a CREATE.
type errorValidator interface {
	Validate(ctx context.Context, obj runtime.Object) field.ErrorList
}

// upstreamStrategy builds the CRD handler's strategy for version v1 of crd, rules included, as the apiserver
// builds it when it serves the CRD: what a CREATE of an object is validated with.
func upstreamStrategy(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition) errorValidator {
	t.Helper()
	val, err := apihelpers.GetSchemaForVersion(crd, "v1")
	if err != nil {
		t.Fatal(err)
	}
	internal := &apiextensionsinternal.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(val, internal, nil); err != nil {
		t.Fatal(err)
	}
	structural, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		t.Fatal(err)
	}
	openAPI, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		t.Fatal(err)
	}
	kind := schema.GroupVersionKind{Group: testGroup, Version: "v1", Kind: "Widget"}
	return customresource.NewStrategy(nil, true, kind, openAPI, nil, structural, nil, nil, nil)
}

// upstreamMessages returns the field errors the apiserver returns when it rejects a CREATE of obj, each once,
// sorted, with the compiler's generated type names written as the findings write them; panicked is set when
// the apiserver's validation panicked.
func upstreamMessages(s errorValidator, obj *unstructured.Unstructured) (msgs []string, panicked bool) {
	defer func() {
		if recover() != nil {
			msgs, panicked = nil, true
		}
	}()
	selfType := regexp.MustCompile(`\bselfType[0-9]+\b`)
	for _, e := range s.Validate(context.Background(), obj) {
		msgs = append(msgs, selfType.ReplaceAllString(e.Error(), "selfType"))
	}
	slices.Sort(msgs)
	return slices.Compact(msgs), false
}

// FuzzFindings validates arbitrary objects against fixed schemas and checks that the findings are values (no
// panic, known verdicts, messages where a reader needs one), that validating leaves the object as it was, and
// that the field errors among the findings are exactly those the apiserver's own CRD strategy, called directly
// on the object without its managedFields, returns for a CREATE.
func FuzzFindings(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"default"},"spec":{"min":1,"max":2}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"default"},"spec":{"min":5,"max":2,"mode":"strict","tags":["a","toolongtoolong"],"ports":[{"name":"a","port":0},{"name":"b","port":70000}],"labels":{"xa":"1","b":"2"},"size":"3Mi","extra":{"forbidden":true},"matrix":[[1,-1],[]]}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"default"},"spec":{"mode":"other","owner":"UPPER","tags":["a","a"],"ports":[{"name":"a"},{"name":"a"}],"size":0,"when":"yesterday","ratio":1}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"default","managedFields":[{"manager":"kubectl","operation":"Apply","apiVersion":"example.com/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}]},"spec":{"min":-1,"max":1001,"size":"4Gi"}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"x","namespace":"default"},"spec":{"replicas":3000000000,"template":{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"a":"1","b":"2","c":"3"}}},"status":{"phase":"Gone"}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"default"},"spec":{"template":{"kind":"ConfigMap"}}}`,
		`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"Not A Name!"},"spec":"text"}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"default"},"spec":{"min":1.5,"max":null,"tags":null,"labels":{"x":null}}}`,
		`{}`,
	} {
		f.Add(uint8(0), []byte(seed))
		f.Add(uint8(1), []byte(seed))
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, len(fuzzSchemas))
	policies := make([]*Policy, len(fuzzSchemas))
	upstream := make([]errorValidator, len(fuzzSchemas))
	for i, s := range fuzzSchemas {
		crds[i] = newCRD(f, s)
		policies[i] = Compile(crds[i], Options{})
		if problems := policies[i].Problems(); problems != nil {
			f.Fatalf("schema %d does not compile: %v", i, problems)
		}
		upstream[i] = upstreamStrategy(f, crds[i])
	}
	f.Fuzz(func(t *testing.T, schemaIndex uint8, body []byte) {
		// The object as a read from the API server gives it: stored as the server encodes it (a whole number
		// written "7.000" is stored as 7), decoded as the unstructured decoder decodes (integers as int64), and
		// kept without apiVersion or kind if it has none.
		var m map[string]any
		if err := utiljson.Unmarshal(body, &m); err != nil || m == nil {
			return // not a JSON object
		}
		stored, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m = nil
		if err := utiljson.Unmarshal(stored, &m); err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{Object: m}
		i := int(schemaIndex) % len(fuzzSchemas)
		before := obj.DeepCopy()

		findings := policies[i].Findings(context.Background(), "v1", obj)
		if !reflect.DeepEqual(obj.Object, before.Object) {
			t.Fatalf("validating the object modified it:\n got %#v\nwant %#v", obj.Object, before.Object)
		}
		var got []string
		for _, fd := range findings {
			switch fd.Verdict {
			case audit.Fail, audit.Error, audit.Skip:
			default:
				t.Fatalf("finding with verdict %q: %+v", fd.Verdict, fd)
			}
			if fd.Message == "" || fd.RuleID == "" {
				t.Fatalf("finding without a message or rule: %+v", fd)
			}
			if fd.FieldError {
				got = append(got, fd.Message)
			}
		}
		slices.Sort(got)
		got = slices.Compact(got)

		forAPIServer := before.DeepCopy()
		unstructured.RemoveNestedField(forAPIServer.Object, "metadata", "managedFields")
		want, panicked := upstreamMessages(upstream[i], forAPIServer)
		if panicked {
			if !slices.ContainsFunc(findings, func(fd Finding) bool { return fd.Verdict == audit.Error }) {
				t.Fatalf("the apiserver's validation panics on %s; the findings hold no error: %s", body, dump(findings))
			}
			return
		}
		if !slices.Equal(got, want) {
			t.Fatalf("object %s, schema %d:\nfindings' field errors:\n  %s\napiserver's:\n  %s", body, i,
				strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}

		checkResults(t, policies[i], obj, len(want) == 0)
	})
}

// checkResults checks the results of obj: known verdicts, the policy's name, the object's reference, a rule
// and a message on each, distinct rules, and a single pass exactly when the object passes.
func checkResults(t *testing.T, p *Policy, obj *unstructured.Unstructured, passes bool) {
	t.Helper()
	results := p.Evaluate(context.Background(), gvr("v1"), obj)
	rules := map[string]bool{}
	nPass, nBad := 0, 0
	for _, r := range results {
		switch r.Verdict {
		case audit.Pass:
			nPass++
		case audit.Fail, audit.Error:
			nBad++
		case audit.Skip:
		default:
			t.Fatalf("result with verdict %q: %+v", r.Verdict, r)
		}
		if r.Policy != testCRD || r.Resource != audit.RefOf(obj) || r.Rule == "" || r.Message == "" {
			t.Fatalf("result %+v: want policy %s, resource %+v, a rule and a message", r, testCRD, audit.RefOf(obj))
		}
		if rules[r.Rule] {
			t.Fatalf("two results of rule %q", r.Rule)
		}
		rules[r.Rule] = true
	}
	if (nPass == 1) == (nBad > 0) || nPass > 1 || (passes && nBad > 0) {
		t.Fatalf("%d passes and %d fails or errors among %s; the apiserver accepts the object: %v", nPass, nBad, fmt.Sprint(results), passes)
	}
}
