package cli

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/mutate"
)

func TestApplyPatch(t *testing.T) {
	op := func(o, path string, v any) mutate.Operation { return mutate.Operation{Op: o, Path: path, Value: v} }
	cases := []struct {
		name    string
		in      string // JSON
		ops     []mutate.Operation
		want    string // JSON; "" when an error is expected
		wantErr string
	}{
		{name: "add a member", in: `{"a":{}}`, ops: []mutate.Operation{op("add", "/a/b", "x")}, want: `{"a":{"b":"x"}}`},
		{name: "add creates missing parents", in: `{}`, ops: []mutate.Operation{op("add", "/metadata/labels/team", "a")},
			want: `{"metadata":{"labels":{"team":"a"}}}`},
		{name: "replace a member", in: `{"a":1}`, ops: []mutate.Operation{op("replace", "/a", int64(2))}, want: `{"a":2}`},
		{name: "replace a missing member adds it", in: `{"c":[{"n":"w"}]}`, ops: []mutate.Operation{op("replace", "/c/0/p", "Always")},
			want: `{"c":[{"n":"w","p":"Always"}]}`},
		{name: "remove a member", in: `{"a":1,"b":2}`, ops: []mutate.Operation{op("remove", "/a", nil)}, want: `{"b":2}`},
		{name: "remove a missing member", in: `{"b":2}`, ops: []mutate.Operation{op("remove", "/a/x", nil)}, want: `{"b":2}`},
		{name: "insert into a list", in: `{"l":[1,3]}`, ops: []mutate.Operation{op("add", "/l/1", int64(2))}, want: `{"l":[1,2,3]}`},
		{name: "append to a list", in: `{"l":[1]}`, ops: []mutate.Operation{op("add", "/l/1", int64(2)), op("add", "/l/-", int64(3))}, want: `{"l":[1,2,3]}`},
		{name: "remove from a list", in: `{"l":[1,2,3]}`, ops: []mutate.Operation{op("remove", "/l/2", nil), op("remove", "/l/0", nil)}, want: `{"l":[2]}`},
		{name: "escaped keys", in: `{"m":{}}`, ops: []mutate.Operation{op("add", "/m/a~1b~0c", "v")}, want: `{"m":{"a/b~c":"v"}}`},
		{name: "index out of range", in: `{"l":[1]}`, ops: []mutate.Operation{op("replace", "/l/3", int64(2))}, wantErr: `applying replace /l/3: no element "3" in a list of 1`},
		{name: "through a scalar", in: `{"a":"s"}`, ops: []mutate.Operation{op("add", "/a/b", "x")}, wantErr: "neither an object nor a list"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := map[string]any{}
			if err := jsonUnmarshal(c.in, &in); err != nil {
				t.Fatal(err)
			}
			before := mustJSON(in)
			got, err := applyPatch(in, c.ops)
			if mustJSON(in) != before {
				t.Errorf("the input was modified: %s", mustJSON(in))
			}
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]any{}
			if err := jsonUnmarshal(c.want, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(comparable(got), comparable(want)) {
				t.Errorf("got %s, want %s", mustJSON(got), c.want)
			}
		})
	}
}

// TestPrintMutationDiff checks the diffs whatif --diff prints against golden files, and by hand: the
// headers kubectl diff prints, the changed lines, and no Secret value.
func TestPrintMutationDiff(t *testing.T) {
	deployment := map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "shop", "managedFields": []any{map[string]any{"manager": "kubectl"}}},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"name": "web", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent"},
		}}}},
	}
	secret := map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"metadata": map[string]any{"name": "creds", "namespace": "shop"},
		"data":     map[string]any{"token": "aHVudGVyMg==", "user": "YWRtaW4="},
	}
	cases := []struct {
		name   string
		stored map[string]any
		patch  []mutate.Operation
		golden string
		want   []string
	}{{
		name:   "deployment",
		stored: deployment,
		patch: []mutate.Operation{
			{Op: "replace", Path: "/spec/template/spec/containers/0/imagePullPolicy", Value: "Always"},
			{Op: "add", Path: "/metadata/labels", Value: map[string]any{"team": "a"}},
		},
		golden: "deployment.diff",
		want: []string{
			"diff -u -N LIVE/apps.v1.Deployment.shop.web MERGED/apps.v1.Deployment.shop.web\n--- LIVE/apps.v1.Deployment.shop.web\n+++ MERGED/apps.v1.Deployment.shop.web\n",
			"\n-        imagePullPolicy: IfNotPresent\n+        imagePullPolicy: Always\n         name: web\n",
			"\n+  labels:\n+    team: a\n",
		},
	}, {
		// What whatif gives it: the stored Secret redacted, and a patch whose values are redacted.
		name:   "secret",
		stored: mutate.RedactedSecret(secret),
		patch: []mutate.Operation{
			{Op: "replace", Path: "/data/token", Value: audit.RedactionMarker},
			{Op: "add", Path: "/data/extra", Value: audit.RedactionMarker},
		},
		golden: "secret.diff",
		want: []string{
			"--- LIVE/v1.Secret.shop.creds\n+++ MERGED/v1.Secret.shop.creds\n",
			"\n-  token: '[redacted]'\n+  extra: '[redacted]'\n+  token: '[redacted] (changed)'\n   user: '[redacted]'\n",
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printMutationDiff(&out, &unstructured.Unstructured{Object: c.stored}, c.patch); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			checkContains(t, got, c.want)
			for _, secret := range []string{"aHVudGVyMg==", "YWRtaW4=", "managedFields"} {
				if strings.Contains(got, secret) {
					t.Errorf("the diff holds %q:\n%s", secret, got)
				}
			}
			checkGolden(t, filepath.Join("testdata", "mutation", c.golden), got)
		})
	}
}

// jsonUnmarshal decodes JSON as the API machinery does (integers as int64).
func jsonUnmarshal(data string, into *map[string]any) error {
	return utiljson.Unmarshal([]byte(data), into)
}
