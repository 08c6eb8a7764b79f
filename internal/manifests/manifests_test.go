package manifests

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
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
		{name: "aliases of a large value within the limit", in: "---\n" + scalarAliases(1<<20, 6), want: "ConfigMap/big@2"},
		{name: "aliases of a large value past the limit", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\n" + scalarAliases(1<<20, 8),
			wantErr: "f.yaml:5: YAML aliases expand the document to more than 8 MiB of JSON"},
		{name: "billion laughs", in: billionLaughs(), wantErr: "f.yaml:1: yaml: document contains excessive aliasing"},
		{name: "invalid JSON at its line", in: "{\"apiVersion\":\"v1\",\n\"kind\": }\n", wantErr: "f.yaml:2: invalid JSON: invalid character '}' looking for beginning of value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Object
			err := Reader{}.decode("f.yaml", strings.NewReader(tc.in), func(o Object) error {
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
	err := Reader{}.decode("f", strings.NewReader("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\nreplicas: 9007199254740993\n"), func(o Object) error {
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

// TestUndecoded checks that objects of the kinds Reader.Undecoded accepts come with the kind and JSON an
// unstructured decoding gives them and no content, that the others and the items of Lists are decoded, and
// that a document that is not an object fails as it does when decoded.
func TestUndecoded(t *testing.T) {
	const in = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: b}\n" +
		"---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n" +
		"---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: in-list}}\n" +
		"---\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"Kind\": \"Secret\", \"metadata\": {\"name\": \"json\"}}\n"
	// Every kind but Deployments, List included: the items of a List are decoded all the same.
	notDeployments := func(gvk schema.GroupVersionKind) bool { return gvk.Kind != "Deployment" }
	var got []string
	err := Reader{Undecoded: notDeployments}.decode("f.yaml", strings.NewReader(in), func(o Object) error {
		name := "(undecoded)"
		if o.Unstructured != nil {
			name = o.GetName()
		}
		got = append(got, fmt.Sprintf("%s %q %s@%d json=%t", name, o.GVK.GroupVersion().String(), o.GVK.Kind, o.Source.Line, o.JSON != nil))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`(undecoded) "v1" ConfigMap@1 json=true`,
		`d "apps/v1" Deployment@6 json=true`,
		`in-list "v1" ConfigMap@10 json=false`,
		`(undecoded) "v1" ConfigMap@15 json=true`, // keys are case-sensitive: "Kind" is another field
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for _, doc := range []string{
		"apiVersion: v1\nmetadata: {name: x}\n",
		"apiVersion: v1\nkind: 7\n",
		"apiVersion: a/b/c\nkind: ConfigMap\n", // an apiVersion that does not parse: no kind
		"---\njust text\n",
	} {
		read := func(r Reader) error {
			return r.decode("f.yaml", strings.NewReader(doc), func(Object) error { return nil })
		}
		decoded, undecoded := read(Reader{}), read(Reader{Undecoded: func(schema.GroupVersionKind) bool { return true }})
		if decoded == nil || fmt.Sprint(decoded) != fmt.Sprint(undecoded) {
			t.Errorf("%q: error %v undecoded, want %v as decoded", doc, undecoded, decoded)
		}
	}
}
