package crdrules

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
)

func TestMultipleVersions(t *testing.T) {
	v1 := specSchema(`type: object
x-kubernetes-validations:
- rule: self.size < 10
properties:
  size: {type: integer}
`)
	v2 := specSchema(`type: object
x-kubernetes-validations:
- rule: self.size < 5
  message: v2 allows less than 5
properties:
  size: {type: integer}
`)
	crd := newCRD(t, v1,
		withVersion(t, "v2", true, v2),
		withVersion(t, "v1alpha1", false, v1),
		withVersion(t, "v1beta1", true, ""),
		withVersion(t, "v0", true, v1),
	)
	p := Compile(crd, Options{})

	wantResources := []schema.GroupVersionResource{gvr("v0"), gvr("v1"), gvr("v2")}
	if got := p.Resources(); !reflect.DeepEqual(got, wantResources) {
		t.Errorf("Resources() = %v, want %v", got, wantResources)
	}
	if got, want := p.Key(), (audit.PolicyKey{Source: audit.SourceCRD, Name: "widgets.example.com"}); got != want {
		t.Errorf("Key() = %q, want %q", got, want)
	}

	ctx := context.Background()
	obj := func(version string) *unstructured.Unstructured {
		return object(t, "apiVersion: example.com/"+version+"\nkind: Widget\nmetadata: {name: x, namespace: default}\nspec: {size: 7}\n")
	}
	if fs := p.Findings(ctx, "v1", obj("v1")); len(fs) != 0 {
		t.Errorf("v1: want no findings, got %s", dump(fs))
	}
	want := []Finding{fail("spec.x-kubernetes-validations[0]", "self.size < 5", invalid, "spec: Invalid value: v2 allows less than 5")}
	if fs := p.Findings(ctx, "v2", obj("v2")); !equalFindings(fs, want) {
		t.Errorf("v2: want %s\ngot %s", dump(want), dump(fs))
	}
	for _, v := range []string{"v1alpha1", "v1beta1", "v3"} {
		if fs := p.Findings(ctx, v, obj(v)); fs != nil {
			t.Errorf("%s is not covered: want nil, got %s", v, dump(fs))
		}
		if rs := p.Evaluate(ctx, gvr(v), obj(v)); rs != nil {
			t.Errorf("%s is not covered: want no results, got %v", v, rs)
		}
	}
}

func TestEvaluate(t *testing.T) {
	root := specSchema(`type: object
x-kubernetes-validations:
- rule: self.size < 10
- rule: self.size == oldSelf.size
properties:
  size: {type: integer, minimum: 0}
`)
	ctx := context.Background()
	cases := []struct {
		name         string
		crdOpts      []crdOption
		opts         Options
		body         string
		wantCategory string
		wantSeverity string
		want         []audit.Result // without Category, Severity and Resource, checked separately
	}{
		{
			name:         "pass with skipped transition rule",
			body:         "spec: {size: 1}",
			wantCategory: DefaultCategory,
			wantSeverity: audit.SeverityMedium,
			want: []audit.Result{
				{Policy: testCRD, Rule: "spec.x-kubernetes-validations[1] (version v1)", Verdict: audit.Skip, Message: transitionSkipMessage,
					Properties: map[string]string{audit.PropCRDVersion: "v1", audit.PropFieldPath: "spec", audit.PropRule: "self.size == oldSelf.size"}},
				{Policy: testCRD, Rule: "validation (version v1)", Verdict: audit.Pass, Message: "object satisfies the validation of widgets.example.com v1",
					Properties: map[string]string{audit.PropCRDVersion: "v1"}},
			},
		},
		{
			name:         "failures, options",
			opts:         Options{Category: "Widgets", Severity: audit.SeverityLow},
			body:         "spec: {size: 11}",
			wantCategory: "Widgets",
			wantSeverity: audit.SeverityLow,
			want: []audit.Result{
				{Policy: testCRD, Rule: "spec.x-kubernetes-validations[0] (version v1)", Verdict: audit.Fail, Message: "spec: Invalid value: failed rule: self.size < 10",
					Properties: map[string]string{audit.PropCRDVersion: "v1", audit.PropFieldPath: "spec", audit.PropReason: invalid, audit.PropRule: "self.size < 10"}},
				{Policy: testCRD, Rule: "spec.x-kubernetes-validations[1] (version v1)", Verdict: audit.Skip, Message: transitionSkipMessage,
					Properties: map[string]string{audit.PropCRDVersion: "v1", audit.PropFieldPath: "spec", audit.PropRule: "self.size == oldSelf.size"}},
			},
		},
		{
			name:         "annotations win over options",
			crdOpts:      []crdOption{withAnnotations(audit.AnnotationCategory, "Storage", audit.AnnotationSeverity, audit.SeverityHigh)},
			opts:         Options{Category: "Widgets", Severity: audit.SeverityLow},
			body:         "spec: {size: -1}",
			wantCategory: "Storage",
			wantSeverity: audit.SeverityHigh,
			want: []audit.Result{
				{Policy: testCRD, Rule: "spec.x-kubernetes-validations[1] (version v1)", Verdict: audit.Skip, Message: transitionSkipMessage,
					Properties: map[string]string{audit.PropCRDVersion: "v1", audit.PropFieldPath: "spec", audit.PropRule: "self.size == oldSelf.size"}},
				{Policy: testCRD, Rule: "schema: spec.size (Invalid value, version v1)", Verdict: audit.Fail, Message: "spec.size: Invalid value: -1: spec.size in body should be greater than or equal to 0",
					Properties: map[string]string{audit.PropCRDVersion: "v1", audit.PropFieldPath: "spec.size", audit.PropReason: invalid}},
			},
		},
		{
			name:         "an unknown severity annotation is ignored",
			crdOpts:      []crdOption{withAnnotations(audit.AnnotationSeverity, "urgent")},
			body:         "spec: {size: 1}",
			wantCategory: DefaultCategory,
			wantSeverity: audit.SeverityMedium,
			want: []audit.Result{
				{Policy: testCRD, Rule: "spec.x-kubernetes-validations[1] (version v1)", Verdict: audit.Skip, Message: transitionSkipMessage,
					Properties: map[string]string{audit.PropCRDVersion: "v1", audit.PropFieldPath: "spec", audit.PropRule: "self.size == oldSelf.size"}},
				{Policy: testCRD, Rule: "validation (version v1)", Verdict: audit.Pass, Message: "object satisfies the validation of widgets.example.com v1",
					Properties: map[string]string{audit.PropCRDVersion: "v1"}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Compile(newCRD(t, root, tc.crdOpts...), tc.opts)
			obj := widget(t, tc.body)
			obj.SetUID("obj-uid")
			got := p.Evaluate(ctx, gvr("v1"), obj)
			wantRef := audit.ObjectRef{APIVersion: "example.com/v1", Kind: "Widget", Namespace: "default", Name: "x", UID: "obj-uid"}
			for i := range tc.want {
				tc.want[i].Category = tc.wantCategory
				tc.want[i].Severity = tc.wantSeverity
				tc.want[i].Resource = wantRef
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("want %+v\ngot  %+v", tc.want, got)
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	root := specSchema(`type: object
x-kubernetes-validations:
- rule: self.m.all(k, k.size() == 3)
  messageExpression: "'keys: ' + string(self.m.size())"
properties:
  a: {type: integer, maximum: 0}
  b: {type: integer, maximum: 0}
  c: {type: integer, maximum: 0}
  m:
    type: object
    additionalProperties:
      type: object
      x-kubernetes-validations:
      - rule: self.v < 1
        messageExpression: "'v is ' + string(self.v)"
      - rule: self.v < 2
        message: v below 2
      properties:
        v: {type: integer}
`)
	var entries []string
	for i := 0; i < 30; i++ {
		entries = append(entries, fmt.Sprintf("k%02d: {v: %d}", i, i%3))
	}
	obj := widget(t, "spec: {a: 1, b: 2, c: 3, m: {"+strings.Join(entries, ", ")+"}}")
	p := Compile(newCRD(t, root), Options{})
	ctx := context.Background()

	first := p.Findings(ctx, "v1", obj)
	// 3 maxima, 10 keys with v=1 (one failure) and 10 with v=2 (two failures).
	if len(first) != 3+10+20 {
		t.Fatalf("want 33 findings, got %d: %s", len(first), dump(first))
	}
	if !sort.SliceIsSorted(first, func(i, j int) bool {
		if first[i].FieldPath != first[j].FieldPath {
			return first[i].FieldPath < first[j].FieldPath
		}
		return first[i].RuleID < first[j].RuleID
	}) {
		t.Errorf("findings are not sorted by field path and rule: %s", dump(first))
	}
	for _, f := range first {
		if strings.HasPrefix(f.FieldPath, "spec.m[") && f.RuleID != "spec.m[*].x-kubernetes-validations[0]" && f.RuleID != "spec.m[*].x-kubernetes-validations[1]" {
			t.Errorf("unexpected rule for %s", dump([]Finding{f}))
		}
		if strings.HasSuffix(f.Message, ": v is 1") && f.RuleID != "spec.m[*].x-kubernetes-validations[0]" {
			t.Errorf("message expression attributed to the wrong rule: %s", dump([]Finding{f}))
		}
	}
	firstResults := p.Evaluate(ctx, gvr("v1"), obj)
	for i := 0; i < 20; i++ {
		if again := p.Findings(ctx, "v1", obj); !reflect.DeepEqual(again, first) {
			t.Fatalf("run %d differs:\nfirst %s\nagain %s", i, dump(first), dump(again))
		}
		if again := p.Evaluate(ctx, gvr("v1"), obj); !reflect.DeepEqual(again, firstResults) {
			t.Fatalf("results of run %d differ", i)
		}
	}
	// A policy compiled again from the same CRD gives the same results.
	if again := Compile(newCRD(t, root), Options{}).Evaluate(ctx, gvr("v1"), obj); !reflect.DeepEqual(again, firstResults) {
		t.Errorf("results of a new compilation differ")
	}
}

func TestConcurrentEvaluate(t *testing.T) {
	root := specSchema(`type: object
x-kubernetes-validations:
- rule: self.a < 10
  messageExpression: "'a is ' + string(self.a)"
- rule: self.b < 10
  messageExpression: "'b is ' + string(self.b)"
properties:
  a: {type: integer}
  b: {type: integer}
`)
	p := Compile(newCRD(t, root), Options{})
	obj := widget(t, "spec: {a: 1, b: 20}")
	want := p.Evaluate(context.Background(), gvr("v1"), obj)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if got := p.Evaluate(context.Background(), gvr("v1"), obj); !reflect.DeepEqual(got, want) {
					errs <- fmt.Sprintf("got %+v, want %+v", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestGarbageObjects(t *testing.T) {
	root := specSchema(`type: object
x-kubernetes-validations:
- rule: self.replicas < 10
- rule: self.replicas == oldSelf.replicas
properties:
  replicas: {type: integer}
  items:
    type: array
    items:
      type: object
      x-kubernetes-validations:
      - rule: self.name.size() > 0
      properties:
        name: {type: string}
  m:
    type: object
    additionalProperties:
      type: string
      x-kubernetes-validations:
      - rule: self != ''
`)
	p := Compile(newCRD(t, root), Options{})
	header := map[string]interface{}{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]interface{}{"name": "x", "namespace": "default"}}
	with := func(kv ...interface{}) *unstructured.Unstructured {
		o := map[string]interface{}{}
		for k, v := range header {
			o[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			o[kv[i].(string)] = kv[i+1]
		}
		return &unstructured.Unstructured{Object: o}
	}
	cases := []struct {
		name string
		obj  *unstructured.Unstructured
	}{
		{"spec is a string", with("spec", "hello")},
		{"spec is a list", with("spec", []interface{}{int64(1), "a", nil})},
		{"spec is null", with("spec", nil)},
		{"replicas is a string", with("spec", map[string]interface{}{"replicas": "ten"})},
		{"replicas is a float", with("spec", map[string]interface{}{"replicas": 1.5})},
		{"items are scalars", with("spec", map[string]interface{}{"replicas": int64(1), "items": []interface{}{"a", int64(2), nil, true}})},
		{"items is a map", with("spec", map[string]interface{}{"replicas": int64(1), "items": map[string]interface{}{"a": "b"}})},
		{"map values are maps", with("spec", map[string]interface{}{"replicas": int64(1), "m": map[string]interface{}{"a": map[string]interface{}{}}})},
		{"metadata is a string", with("metadata", "x", "spec", map[string]interface{}{"replicas": int64(1)})},
		{"metadata has a bad field", with("metadata", map[string]interface{}{"name": "x", "namespace": "default", "labels": "nope"})},
		{"no type meta", &unstructured.Unstructured{Object: map[string]interface{}{"spec": map[string]interface{}{"replicas": int64(1)}}}},
		{"empty object", &unstructured.Unstructured{Object: map[string]interface{}{}}},
		{"nil content", &unstructured.Unstructured{}},
		{"unexpected Go types", with("spec", map[string]interface{}{"replicas": struct{ A int }{1}, "m": map[string]string{"a": "b"}})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fs []Finding
			var rs []audit.Result
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panicked: %v", r)
					}
				}()
				fs = p.Findings(context.Background(), "v1", tc.obj)
				rs = p.Evaluate(context.Background(), gvr("v1"), tc.obj)
			}()
			bad := false
			for _, f := range fs {
				bad = bad || f.Verdict == audit.Fail || f.Verdict == audit.Error
			}
			if !bad {
				t.Errorf("want a fail or error finding, got %s", dump(fs))
			}
			if len(rs) == 0 {
				t.Errorf("want results, got none")
			}
			for _, r := range rs {
				if r.Verdict == audit.Pass {
					t.Errorf("want no pass, got %+v", r)
				}
			}
		})
	}
}

func TestIntegerTypes(t *testing.T) {
	root := specSchema(`type: object
x-kubernetes-validations:
- rule: self.replicas == 3 && self.ratio > 1.0
properties:
  replicas: {type: integer}
  ratio: {type: number}
`)
	p := Compile(newCRD(t, root), Options{})
	// encoding/json decodes every number as float64; the apiserver's decoder gives int64 for integers.
	var content map[string]interface{}
	if err := json.Unmarshal([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"x","namespace":"default"},"spec":{"replicas":3,"ratio":1.5}}`), &content); err != nil {
		t.Fatal(err)
	}
	goInts := map[string]interface{}{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]interface{}{"name": "x", "namespace": "default"},
		"spec":     map[string]interface{}{"replicas": 3, "ratio": float32(1.5)},
	}
	for name, obj := range map[string]map[string]interface{}{"float64 from encoding/json": content, "Go int": goInts} {
		t.Run(name, func(t *testing.T) {
			before := fmt.Sprintf("%#v", obj)
			if fs := p.Findings(context.Background(), "v1", &unstructured.Unstructured{Object: obj}); len(fs) != 0 {
				t.Errorf("want no findings, got %s", dump(fs))
			}
			if after := fmt.Sprintf("%#v", obj); after != before {
				t.Errorf("the object was modified:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func TestBadSchema(t *testing.T) {
	cases := []struct {
		name    string
		root    string
		message string
	}{
		{
			name:    "$ref",
			root:    specSchema("type: object\nproperties:\n  a: {$ref: '#/definitions/a'}\n"),
			message: "cannot validate version v1: the schema is not structural: OpenAPIV3Schema '$ref' is not supported",
		},
		{
			name:    "preserve-unknown-fields false",
			root:    specSchema("type: object\nx-kubernetes-preserve-unknown-fields: false\n"),
			message: "cannot validate version v1: the schema is not structural: internal error: 'x-kubernetes-preserve-unknown-fields' must be true or undefined",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Compile(newCRD(t, tc.root), Options{})
			if got := p.Resources(); len(got) != 1 {
				t.Errorf("the version is still covered: want 1 resource, got %v", got)
			}
			want := []Finding{{RuleID: RuleIDSchema, Message: tc.message, Reason: "InternalError", Verdict: audit.Error}}
			for _, body := range []string{"spec: {}", "spec: {a: 1}"} {
				if got := p.Findings(context.Background(), "v1", widget(t, body)); !reflect.DeepEqual(got, want) {
					t.Errorf("object %q: want %s\ngot %s", body, dump(want), dump(got))
				}
			}
		})
	}

	t.Run("nil CRD", func(t *testing.T) {
		p := Compile(nil, Options{})
		if p.Key() != (audit.PolicyKey{Source: audit.SourceCRD}) || len(p.Resources()) != 0 {
			t.Errorf("want an empty policy, got key %q resources %v", p.Key(), p.Resources())
		}
		if rs := p.Evaluate(context.Background(), gvr("v1"), widget(t, "spec: {}")); rs != nil {
			t.Errorf("want no results, got %v", rs)
		}
	})
}
