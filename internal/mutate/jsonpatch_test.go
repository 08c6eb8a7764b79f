package mutate

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
)

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to string
		want     string
	}{
		{name: "equal", from: `{"a":1,"b":[1,2]}`, to: `{"a":1.0,"b":[1,2]}`, want: `[]`},
		{name: "add key", from: `{"a":1}`, to: `{"a":1,"b":{"c":"d"}}`, want: `[{"op":"add","path":"/b","value":{"c":"d"}}]`},
		{name: "remove key", from: `{"a":1,"b":2}`, to: `{"a":1}`, want: `[{"op":"remove","path":"/b"}]`},
		{name: "replace nested", from: `{"a":{"b":"x"}}`, to: `{"a":{"b":"y"}}`, want: `[{"op":"replace","path":"/a/b","value":"y"}]`},
		{name: "replace with null", from: `{"a":"x"}`, to: `{"a":null}`, want: `[{"op":"replace","path":"/a","value":null}]`},
		{name: "escaped keys", from: `{"l":{}}`, to: `{"l":{"app.io/n~x":"v"}}`, want: `[{"op":"add","path":"/l/app.io~1n~0x","value":"v"}]`},
		{name: "list element", from: `{"c":[{"n":"a","p":"x"},{"n":"b"}]}`, to: `{"c":[{"n":"a","p":"y"},{"n":"b"}]}`, want: `[{"op":"replace","path":"/c/0/p","value":"y"}]`},
		{name: "list append", from: `{"c":[1]}`, to: `{"c":[1,2,3]}`, want: `[{"op":"add","path":"/c/1","value":2},{"op":"add","path":"/c/2","value":3}]`},
		{name: "list truncate", from: `{"c":[1,2,3]}`, to: `{"c":[1]}`, want: `[{"op":"remove","path":"/c/2"},{"op":"remove","path":"/c/1"}]`},
		{name: "list reorder", from: `{"c":[1,2]}`, to: `{"c":[2,1,3]}`, want: `[{"op":"replace","path":"/c","value":[2,1,3]}]`},
		{name: "type change", from: `{"a":{"b":1}}`, to: `{"a":[1]}`, want: `[{"op":"replace","path":"/a","value":[1]}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var from, to map[string]any
			if err := json.Unmarshal([]byte(tc.from), &from); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.to), &to); err != nil {
				t.Fatal(err)
			}
			ops := Diff(from, to)
			got, err := json.Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) == 0 {
				got = []byte("[]")
			}
			if string(got) != tc.want {
				t.Errorf("Diff:\n got %s\nwant %s", got, tc.want)
			}
			// The patch, applied by an independent RFC 6902 implementation, gives the target.
			p, err := jsonpatch.DecodePatch(got)
			if err != nil {
				t.Fatal(err)
			}
			patched, err := p.Apply([]byte(tc.from))
			if err != nil {
				t.Fatalf("applying %s: %v", got, err)
			}
			var result map[string]any
			if err := json.Unmarshal(patched, &result); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(result, to) {
				t.Errorf("patched %s, want %s", patched, tc.to)
			}
		})
	}
}

func TestFieldPath(t *testing.T) {
	for pointer, want := range map[string]string{
		"":                                   "<object>",
		"/spec/containers/0/image":           "spec.containers[0].image",
		"/metadata/labels/app.io~1name":      `metadata.labels["app.io/name"]`,
		"/metadata/annotations/derived-tier": `metadata.annotations["derived-tier"]`,
		"/data/a~0b":                         `data["a~b"]`,
	} {
		if got := FieldPath(pointer); got != want {
			t.Errorf("FieldPath(%q) = %s, want %s", pointer, got, want)
		}
	}
}

func TestBoundedPatch(t *testing.T) {
	ops := []Operation{
		{Op: "add", Path: "/a", Value: "1"},
		{Op: "add", Path: "/b", Value: strings.Repeat("x", 100)},
		{Op: "remove", Path: "/c"},
	}
	for _, tc := range []struct {
		name      string
		max       int
		want      string
		truncated bool
	}{
		{name: "all fit", max: 1000, want: `[{"op":"add","path":"/a","value":"1"},{"op":"add","path":"/b","value":"` + strings.Repeat("x", 100) + `"},{"op":"remove","path":"/c"}]`},
		{name: "first fits", max: 60, want: `[{"op":"add","path":"/a","value":"1"}]`, truncated: true},
		{name: "none fits", max: 10, want: `[]`, truncated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, truncated, err := BoundedPatch(ops, tc.max)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || truncated != tc.truncated {
				t.Errorf("BoundedPatch = %s, %v; want %s, %v", got, truncated, tc.want, tc.truncated)
			}
			if len(got) > tc.max && tc.truncated {
				t.Errorf("%d bytes exceed the bound %d", len(got), tc.max)
			}
		})
	}
}
