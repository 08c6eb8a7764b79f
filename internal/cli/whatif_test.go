package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/test/envtestutil"
)

// update rewrites the golden files of the tests: go test ./internal/cli -run Whatif -update
var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// whatifCase is one run of `kubectl celaudit whatif` against the test cluster.
type whatifCase struct {
	name string
	args []string
	// stdin is the standard input, for -f -.
	stdin string
	code  ExitCode
	// golden is the file under testdata/whatif/golden that holds the normalized standard output; "" for none.
	golden string
	// want are lines (or, with a leading "~", regular expressions) that the output (stdout, then stderr)
	// must contain, written by hand from the fixtures: the golden files are checked against them.
	want []string
}

// TestWhatif runs the whatif command in process against a real API server holding testdata/whatif: golden
// outputs, exit codes, and the reason given for each kind of bad input.
func TestWhatif(t *testing.T) {
	kubeconfig := startWhatifCluster(t)
	data := func(name string) string { return filepath.Join("testdata", "whatif", name) }
	cases := []whatifCase{
		{
			name: "tighten CRD, table", args: []string{"whatif", "-f", data("tighten.yaml")}, code: ExitViolations, golden: "tighten.table",
			want: []string{
				`~crd/gadgets.whatif.example.com\s+4\s+2\s+1\s+0`,
				`~new\s+fail\s+ratcheted\s+crd/gadgets.whatif.example.com\s+wi-lab\s+Gadget/long\s+spec.owner: Too long: may not be more than 8 bytes`,
				`~new\s+skip\s+-\s+crd/gadgets.whatif.example.com\s+wi-lab\s+Gadget/long\s+<nil>: Invalid value: null: some validation rules were not checked because the object was invalid`,
				`~new\s+fail\s+ratcheted\s+crd/gadgets.whatif.example.com\s+wi-shop\s+Gadget/odd\s+spec: Invalid value: replicas must be even`,
				`~fixed\s+fail\s+-\s+crd/gadgets.whatif.example.com\s+wi-shop\s+Gadget/large\s+spec: Invalid value: size must be s or m`,
			},
		},
		{
			name: "tighten CRD, json", args: []string{"whatif", "-f", data("tighten.yaml"), "-o", "json"}, code: ExitViolations, golden: "tighten.json",
			want: []string{`"kind": "List"`, `"whatif": "new"`, `"onUpdate": "ratcheted"`, `"name": "long"`, `"namespace": "wi-lab"`, `"skip": 1`,
				`"policyKind": "CustomResourceDefinition"`},
		},
		{
			name: "tighten CRD from stdin, all results, yaml", args: []string{"whatif", "-f", "-", "-o", "yaml", "--results", "all"},
			stdin: mustRead(t, data("tighten.yaml")), code: ExitViolations,
			// The pass of the Gadget the proposal fixes, and of one that passes both ways.
			want: []string{"~(?s)name: large.*?result: pass", "whatif: fixed", "whatif: unchanged", "kind: PolicyReport"},
		},
		{
			name: "relax CRD: nothing new", args: []string{"whatif", "-f", data("relax.yaml")}, code: ExitOK, golden: "relax.table",
			want: []string{`~crd/gadgets.whatif.example.com\s+4\s+0\s+1\s+0`, `~fixed\s+fail\s+-\s+crd/gadgets.whatif.example.com\s+wi-shop\s+Gadget/large`},
		},
		{
			// v2 is read through v1, which the cluster serves, as the API server will serve it: v1's results
			// stay as they are, v2's failures are new.
			name: "stricter version served beside v1", args: []string{"whatif", "-f", data("add-version.yaml")}, code: ExitViolations, golden: "add-version.table",
			want: []string{
				`~crd/gadgets.whatif.example.com\s+8\s+2\s+0\s+1`,
				`~unchanged\s+fail\s+ratcheted\s+crd/gadgets.whatif.example.com\s+wi-shop\s+Gadget/large\s+spec: Invalid value: size must be s or m \(version v1\)`,
				`~new\s+fail\s+ratcheted\s+crd/gadgets.whatif.example.com\s+wi-shop\s+Gadget/large\s+spec: Invalid value: size must be s or m \(version v2\)`,
				`~new\s+fail\s+ratcheted\s+crd/gadgets.whatif.example.com\s+wi-lab\s+Gadget/long\s+spec.replicas: Invalid value: 4: spec.replicas in body should be less than or equal to 3 \(version v2\)`,
			},
		},
		{
			name: "stricter version, json", args: []string{"whatif", "-f", data("add-version.yaml"), "-o", "json"}, code: ExitViolations,
			want: []string{`"crdVersion": "v2"`, `"rule": "schema: spec.replicas (Invalid value, version v2)"`, `"whatif": "new"`},
		},
		{
			name: "the version objects are stored in no longer served", args: []string{"whatif", "-f", data("stop-v1.yaml")}, code: ExitViolations,
			want: []string{
				"note: CustomResourceDefinition gadgets.whatif.example.com: the proposal stops serving version v1, which objects are stored in " +
					"(status.storedVersions v1): clients reading or writing whatif.example.com/v1 will get NotFound; they are evaluated in the versions it still serves, v2",
				// v1's failure is fixed (nothing reads it in v1 any more), v2's is new.
				`~crd/gadgets.whatif.example.com\s+4\s+1\s+1\s+0`,
				`~fixed\s+fail\s+-\s+crd/gadgets.whatif.example.com\s+wi-shop\s+Gadget/large\s+spec: Invalid value: size must be s or m`,
				`~new\s+fail\s+ratcheted\s+crd/gadgets.whatif.example.com\s+wi-shop\s+Gadget/large\s+spec: Invalid value: size must be s or m`,
			},
		},
		{
			name: "binding switched to Deny", args: []string{"whatif", "--binding", "wi-owner", "--actions", "Deny"}, code: ExitViolations, golden: "binding.table",
			want: []string{
				// The warning of today becomes a denial: a new fail, and nothing fixed.
				`~vap/wi-owner\s+2\s+1\s+0\s+0`,
				`~new\s+fail\s+rejected\s+vap/wi-owner\s+wi-shop\s+ConfigMap/anonymous\s+ConfigMap anonymous has no owner label`,
			},
		},
		{
			name: "binding switched to Audit: warnings only", args: []string{"whatif", "--binding", "wi-owner", "--actions", "Audit"}, code: ExitOK,
			want: []string{`~vap/wi-owner\s+2\s+0\s+0\s+1`, `~unchanged\s+warn\s+-\s+vap/wi-owner\s+wi-shop\s+ConfigMap/anonymous`},
		},
		{
			name: "new warnings fail with --fail-on warn", code: ExitViolations,
			args:  []string{"whatif", "-f", "-", "--fail-on", "warn"},
			stdin: strings.ReplaceAll(mustRead(t, data("live-rules.yaml")), "name: wi-owner}\nspec:\n  policyName: wi-owner", "name: wi-owner-lab}\nspec:\n  policyName: wi-owner"),
			want:  []string{`~vap/wi-owner\s+2\s+1\s+0\s+1`, `~new\s+warn\s+-\s+vap/wi-owner\s+wi-shop\s+ConfigMap/anonymous`},
		},
		{
			name: "new warnings pass with --fail-on fail", code: ExitOK,
			args:  []string{"whatif", "-f", "-"},
			stdin: strings.ReplaceAll(mustRead(t, data("live-rules.yaml")), "name: wi-owner}\nspec:\n  policyName: wi-owner", "name: wi-owner-lab}\nspec:\n  policyName: wi-owner"),
			want:  []string{`~vap/wi-owner\s+2\s+1\s+0\s+1`},
		},
		{
			name: "AuditPolicy in Deny", args: []string{"whatif", "-f", data("auditpolicy.yaml")}, code: ExitViolations,
			want: []string{
				`~auditpolicy/wi-short-owner\s+2\s+1\s+0\s+0`,
				`~new\s+fail\s+rejected\s+auditpolicy/wi-short-owner\s+wi-shop\s+ConfigMap/anonymous\s+ConfigMap anonymous needs an owner of at most 3 characters`,
			},
		},
		{
			name: "AuditPolicy in Deny, json", args: []string{"whatif", "-f", data("auditpolicy.yaml"), "-o", "json"}, code: ExitViolations,
			want: []string{`"policy": "wi-short-owner"`, `"policyKind": "AuditPolicy"`},
		},
		{
			name: "unparsable YAML", args: []string{"whatif", "-f", data("bad/unparsable.yaml")}, code: ExitBadInput,
			want: []string{"~error: testdata/whatif/bad/unparsable.yaml:[0-9]+: "},
		},
		{
			name: "unknown kind", args: []string{"whatif", "-f", data("bad/unknown-kind.yaml")}, code: ExitBadInput,
			want: []string{"testdata/whatif/bad/unknown-kind.yaml:5: Gizmo wi-shop/g: unknown kind whatif.example.com/v1, Kind=Gizmo"},
		},
		{
			name: "CRD the API server rejects", args: []string{"whatif", "-f", data("bad/invalid-crd.yaml")}, code: ExitBadInput,
			want: []string{`testdata/whatif/bad/invalid-crd.yaml:1: the API server would reject CustomResourceDefinition gizmos.whatif.example.com: metadata.name: Invalid value: "gizmos.whatif.example.com": must be spec.names.plural+"."+spec.group`},
		},
		{
			name: "CRD rule that does not compile", args: []string{"whatif", "-f", data("bad/crd-bad-rule.yaml")}, code: ExitBadInput,
			want: []string{"~testdata/whatif/bad/crd-bad-rule.yaml:1: the API server would reject CustomResourceDefinition gadgets.whatif.example.com: .*x-kubernetes-validations\\[0\\].rule: Invalid value: .*compilation failed: ERROR: <input>:1:19: found no matching overload for '_==_'"},
		},
		{
			name: "policy expression that does not compile", args: []string{"whatif", "-f", data("bad/bad-expression.yaml")}, code: ExitBadInput,
			want: []string{"~testdata/whatif/bad/bad-expression.yaml:1: ValidatingAdmissionPolicy wi-broken: spec.validations\\[0\\].expression: compilation error: compilation failed: ERROR: <input>:1:33: Syntax error"},
		},
		{name: "no proposal", args: []string{"whatif"}, code: ExitBadInput, want: []string{"nothing proposed"}},
		{name: "--actions without --binding", args: []string{"whatif", "-f", data("relax.yaml"), "--actions", "Deny"}, code: ExitBadInput, want: []string{"--binding and --actions go together"}},
		{name: "Deny and Warn", args: []string{"whatif", "--binding", "wi-owner", "--actions", "Deny,Warn"}, code: ExitBadInput, want: []string{"Deny and Warn may not be used together"}},
		{name: "unknown binding", args: []string{"whatif", "--binding", "nope", "--actions", "Deny"}, code: ExitBadInput, want: []string{"--binding nope: no ValidatingAdmissionPolicyBinding of that name"}},
		{name: "unknown output", args: []string{"whatif", "-f", data("relax.yaml"), "-o", "junit"}, code: ExitBadInput, want: []string{`unknown output format "junit"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runPlugin(append(tc.args, "--kubeconfig", kubeconfig), tc.stdin)
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			checkContains(t, stdout+stderr, tc.want)
			if tc.golden != "" {
				checkGolden(t, filepath.Join("testdata", "whatif", "golden", tc.golden), normalizeWhatif(stdout))
			}
		})
	}

	t.Run("unreachable cluster", func(t *testing.T) {
		unreachable := filepath.Join(t.TempDir(), "kubeconfig")
		if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := runPlugin([]string{"whatif", "-f", data("relax.yaml"), "--kubeconfig", unreachable}, "")
		if code != ExitCluster {
			t.Errorf("exit code %d, want %d; stderr:\n%s", code, ExitCluster, stderr)
		}
		checkContains(t, stderr, []string{"error: reading the cluster's served resources: "})
	})
}

// startWhatifCluster starts a control plane holding testdata/whatif/cluster.yaml, then live-rules.yaml, and
// returns the path of a kubeconfig for it.
func startWhatifCluster(t *testing.T) string {
	t.Helper()
	env := envtestutil.StartForTest(t)
	ctx := context.Background()
	for _, file := range []string{"cluster.yaml", "live-rules.yaml"} {
		objs, err := envtestutil.DecodeYAML([]byte(mustRead(t, filepath.Join("testdata", "whatif", file))))
		if err != nil {
			t.Fatal(err)
		}
		if err := envtestutil.Apply(ctx, env.Client, objs...); err != nil {
			t.Fatal(err)
		}
	}
	waitServed(t, env.Client)
	return env.KubeconfigFile(t)
}

// waitServed waits until the API server enforces the live rules: a Gadget of size l is rejected.
func waitServed(t *testing.T, c client.Client) {
	t.Helper()
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "whatif.example.com/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "probe", "namespace": "wi-lab"},
		"spec":     map[string]any{"size": "l"},
	}}
	envtestutil.Eventually(t, 30e9, func() error {
		if err := c.Create(context.Background(), probe.DeepCopy(), client.DryRunAll); err == nil {
			return fmt.Errorf("the size rule is not enforced yet")
		}
		return nil
	})
}

// runPlugin runs `kubectl celaudit args...` in process.
func runPlugin(args []string, stdin string) (stdout, stderr string, code ExitCode) {
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut}
	code = ExitCode(Run(streams, args))
	return out.String(), errOut.String(), code
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// checkContains checks that out holds each of want: a substring, or with a leading "~" a regular expression.
func checkContains(t *testing.T, out string, want []string) {
	t.Helper()
	for _, w := range want {
		if re, ok := strings.CutPrefix(w, "~"); ok {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("output does not match %q:\n%s", re, out)
			}
		} else if !strings.Contains(out, w) {
			t.Errorf("output does not contain %q:\n%s", w, out)
		}
	}
}

// Values that differ from one control plane to the next: object UIDs, the result IDs computed from them,
// and the reports' timestamps.
var (
	uidPattern       = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	resultIDPattern  = regexp.MustCompile(`"resultID": "[0-9a-f]+"`)
	timestampPattern = regexp.MustCompile(`"seconds": [0-9]+`)
)

// normalizeWhatif replaces what differs between runs with stable placeholders.
func normalizeWhatif(out string) string {
	seen := map[string]string{}
	out = uidPattern.ReplaceAllStringFunc(out, func(uid string) string {
		if _, ok := seen[uid]; !ok {
			seen[uid] = fmt.Sprintf("uid-%d", len(seen)+1)
		}
		return seen[uid]
	})
	out = resultIDPattern.ReplaceAllString(out, `"resultID": "<id>"`)
	return timestampPattern.ReplaceAllString(out, `"seconds": 0`)
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update to rewrite it after review):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
