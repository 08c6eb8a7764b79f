package crdrules

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

func TestNormalizeObject(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   map[string]interface{}
		want map[string]interface{}
		same bool // the object itself comes back
	}{
		{
			name: "as decoded from the API server",
			in: map[string]interface{}{"a": int64(1), "b": 1.5, "c": "x", "d": true, "e": nil,
				"f": []interface{}{int64(2), map[string]interface{}{"g": 1e300}}, "h": math.Inf(1)},
			want: map[string]interface{}{"a": int64(1), "b": 1.5, "c": "x", "d": true, "e": nil,
				"f": []interface{}{int64(2), map[string]interface{}{"g": 1e300}}, "h": math.Inf(1)},
			same: true,
		},
		{
			name: "whole floats become integers",
			in:   map[string]interface{}{"a": float64(3), "b": []interface{}{1.5, float64(-2)}},
			want: map[string]interface{}{"a": int64(3), "b": []interface{}{1.5, int64(-2)}},
		},
		{
			name: "Go integers and json.Number",
			in: map[string]interface{}{"a": 1, "b": int32(2), "c": uint64(math.MaxUint64), "d": json.Number("7"),
				"e": json.Number("0.5"), "f": map[string]interface{}{"g": uint8(4)}},
			want: map[string]interface{}{"a": int64(1), "b": int64(2), "c": float64(math.MaxUint64), "d": int64(7),
				"e": 0.5, "f": map[string]interface{}{"g": int64(4)}},
		},
		{
			name: "one value deep inside",
			in:   map[string]interface{}{"a": []interface{}{map[string]interface{}{"b": []interface{}{"x", 2}}}},
			want: map[string]interface{}{"a": []interface{}{map[string]interface{}{"b": []interface{}{"x", int64(2)}}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := deepCopyJSON(tc.in) // to tell whether the input was modified
			got := normalizeObject(tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("normalizeObject = %#v, want %#v", got, tc.want)
			}
			if same := reflect.ValueOf(got).Pointer() == reflect.ValueOf(tc.in).Pointer(); same != tc.same {
				t.Fatalf("returned the object itself: %v, want %v", same, tc.same)
			}
			if !reflect.DeepEqual(tc.in, before) {
				t.Fatalf("the input was modified: %#v", tc.in)
			}
		})
	}
}

func deepCopyJSON(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, e := range t {
			out[k] = deepCopyJSON(e)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, e := range t {
			out[i] = deepCopyJSON(e)
		}
		return out
	default:
		return v
	}
}

// TestManagedFieldsChangeNoFinding: validation skips the managed fields of stored objects (see forValidation);
// the findings must be those of the same object without them, and the object itself must keep them.
func TestManagedFieldsChangeNoFinding(t *testing.T) {
	crd := newCRD(t, specSchema(`type: object
x-kubernetes-validations:
- rule: self.replicas <= 3
  message: at most 3 replicas
properties:
  replicas: {type: integer, minimum: 0}
`))
	for _, tc := range []struct{ name, obj string }{
		{"pass", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x, namespace: default}\nspec: {replicas: 1}\n"},
		{"rule fails", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x, namespace: default}\nspec: {replicas: 5}\n"},
		{"schema fails", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x, namespace: default}\nspec: {replicas: -1}\n"},
		{"invalid name", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: Bad_Name, namespace: default}\nspec: {replicas: 1}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := findings(t, crd, object(t, tc.obj))
			obj := object(t, tc.obj)
			withManagedFields(t, obj)
			got := findings(t, crd, obj) // also checks that obj keeps its managed fields
			if !equalFindings(got, want) {
				t.Errorf("with managed fields\n got %s\nwant %s", dump(got), dump(want))
			}
			if _, ok := obj.Object["metadata"].(map[string]interface{})["managedFields"]; !ok {
				t.Error("the object lost its managed fields")
			}
		})
	}
}
