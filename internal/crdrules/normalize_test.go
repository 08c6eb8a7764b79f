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
