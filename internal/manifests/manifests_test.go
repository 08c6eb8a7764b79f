package manifests

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// names renders objects as "kind/name@line" for comparison.
func names(objs []Object) string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, fmt.Sprintf("%s/%s@%d", o.GetKind(), o.GetName(), o.Source.Line))
	}
	return strings.Join(out, " ")
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, in, want, wantErr string
	}{
		{name: "multi-document YAML with comments and empty documents",
			in:   "# leading comment\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: one\n---\n---   # empty\n# only a comment\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: two\n",
			want: "ConfigMap/one@1 Secret/two@10"},
		{name: "JSON object", in: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns"}}`, want: "Namespace/ns@1"},
		{name: "JSON stream", in: "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"a\"}}\n\n{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\n\"metadata\":{\"name\":\"b\"}}\n",
			want: "Namespace/a@1 Namespace/b@3"},
		{name: "List expanded", in: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: cm-x}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: cm-y}\n",
			want: "ConfigMap/cm-x@1 ConfigMap/cm-y@1"},
		{name: "YAML syntax error at the file's line", in: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ok\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n",
			wantErr: "f.yaml:6: yaml: line 9: did not find expected ',' or ']'"},
		{name: "no kind", in: "apiVersion: v1\nmetadata:\n  name: x\n", wantErr: "f.yaml:1: not a Kubernetes object: kind is not set"},
		{name: "no apiVersion or kind", in: "foo: bar\n", wantErr: "f.yaml:1: not a Kubernetes object: apiVersion and kind are not set"},
		{name: "scalar document", in: "---\njust text\n", wantErr: "f.yaml:2: not a Kubernetes object: a document must be a mapping, not a string"},
		{name: "invalid JSON at its line", in: "{\"apiVersion\":\"v1\",\n\"kind\": }\n", wantErr: "f.yaml:2: invalid JSON: invalid character '}' looking for beginning of value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Object
			err := Decode("f.yaml", strings.NewReader(tc.in), func(o Object) error {
				got = append(got, o)
				return nil
			})
			if tc.wantErr != "" {
				var e *Error
				if err == nil || !errors.As(err, &e) || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want an *Error starting %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if names(got) != tc.want {
				t.Errorf("got %s, want %s", names(got), tc.want)
			}
		})
	}
}

func TestDecodeKeepsIntegers(t *testing.T) {
	var got []Object
	err := Decode("f", strings.NewReader("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\nreplicas: 9007199254740993\n"), func(o Object) error {
		got = append(got, o)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got[0].Object["replicas"].(int64); !ok || v != 9007199254740993 {
		t.Errorf("replicas = %#v, want int64 9007199254740993", got[0].Object["replicas"])
	}
}

func TestRead(t *testing.T) {
	stdin := strings.NewReader("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: in}\n")
	got, err := Reader{Stdin: stdin}.Read([]string{"testdata/dir", "-"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "ConfigMap/a@1 ConfigMap/b@1 ConfigMap/in@1"; names(got) != want {
		t.Errorf("got %s, want %s", names(got), want)
	}
	if got[1].Source.File != "testdata/dir/sub/b.json" || got[2].Source.String() != "<stdin>:1" {
		t.Errorf("sources %v %v", got[1].Source, got[2].Source)
	}
	for _, tc := range []struct {
		paths []string
		want  string
	}{
		{[]string{"testdata/missing.yaml"}, "testdata/missing.yaml:0: stat: no such file or directory"},
		{[]string{"testdata/dir/.hidden/.."}, ""},
		{[]string{"-", "-"}, "<stdin>:0: standard input given twice"},
	} {
		_, err := Reader{Stdin: strings.NewReader("")}.Read(tc.paths)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.paths, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: error %v, want %q", tc.paths, err, tc.want)
		}
	}
}

// TestDecodeTooDeep checks that a document nested deeper than the decoders go gets one message, whichever
// decoder finds it: the YAML parser (block style), the JSON decoder after YAML flow collections became JSON,
// or the JSON decoder of a JSON file.
func TestDecodeTooDeep(t *testing.T) {
	const tooDeep = "testdata/deep/%s:%d: not a Kubernetes object: mappings and lists nest more than 10000 levels deep, which the API server does not decode"
	for _, tc := range []struct {
		file    string
		wantErr string // "" when the object decodes
	}{
		{file: "flow.yaml", wantErr: fmt.Sprintf(tooDeep, "flow.yaml", 1)},
		{file: "flow-mappings.yaml", wantErr: fmt.Sprintf(tooDeep, "flow-mappings.yaml", 1)},
		{file: "block.yaml", wantErr: fmt.Sprintf(tooDeep, "block.yaml", 1)},
		{file: "json.json", wantErr: fmt.Sprintf(tooDeep, "json.json", 1)},
		{file: "at-limit.yaml"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, err := Reader{}.Read([]string{"testdata/deep/" + tc.file})
			if tc.wantErr == "" {
				if err != nil || len(got) != 1 || got[0].GetName() != "deep" {
					t.Fatalf("got %d objects, error %v; want the ConfigMap deep", len(got), err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || err.Error() != tc.wantErr {
				t.Errorf("error %v\nwant %s", err, tc.wantErr)
			}
		})
	}
}
