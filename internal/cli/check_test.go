package cli

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	checkManifests = "testdata/check/manifests"
	checkRules     = "testdata/check/rules"
)

// runCheck runs `kubectl celaudit check args...` in process.
func runCheck(stdin string, args ...string) (stdout, stderr string, code ExitCode) {
	return runPlugin(append([]string{"check"}, args...), stdin)
}

// timestamps of report results: the time of the run.
var checkTimestamp = regexp.MustCompile(`"seconds": \d+`)

func checkGoldenFile(t *testing.T, name, got string) {
	t.Helper()
	checkGolden(t, filepath.Join("testdata/check/golden", name), got)
}

// TestCheckOutputs checks each output format against its golden file and, independently of the golden
// files, against verdicts written by hand from the fixture's comments.
func TestCheckOutputs(t *testing.T) {
	for _, tc := range []struct {
		format string
		golden string
		want   []string // substrings written by hand
	}{{
		format: OutputTable,
		golden: "table.txt",
		want: []string{
			// summary lines: matched objects, then pass/fail/warn/error/skip
			"crd/widgets.check.example.com  4        1     4     0     0      1",
			"vap/replica-limit              3        1     1     0     1      0",
			"vap/rolling-updates            4        3     0     1     0      0",
			// the size default (m) makes 20 and 2 replicas fail the odd-replicas rule
			"team-a/Widget/crowded     testdata/check/manifests/widgets.yaml:6      spec: Invalid value: medium widgets have an odd number of replicas",
			"team-b/Widget/pruned      testdata/check/manifests/widgets.yaml:11     spec: Invalid value: medium widgets have an odd number of replicas",
			"team-b/Widget/huge        testdata/check/manifests/widgets.yaml:19     spec.size: Unsupported value: \"xl\": supported values: \"s\", \"m\", \"l\"",
			"replicas 5 exceed the limit of 3",
			"failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
			// Recreate warns; web, worker and lost get the RollingUpdate default and pass
			"warn    vap/rolling-updates            validations[0] (binding rolling-updates)                     team-a/Deployment/api",
			"9 objects checked, 1 matched by no policy.",
		},
	}, {
		format: OutputJSON,
		golden: "reports.json",
		want:   []string{`"kind": "List"`, `"kind": "PolicyReport"`, `"namespace": "team-a"`, `"message": "replicas 5 exceed the limit of 3"`},
	}, {
		format: OutputJUnit,
		golden: "junit.xml",
		want: []string{
			`<testsuite name="vap/replica-limit" tests="2" failures="2" errors="0" skipped="0" time="0">`,
			`<testcase name="team-a/Deployment/api validations[0] (binding replica-limit, param team-a/limits)" classname="vap/replica-limit" file="testdata/check/manifests/deployments.json" line="5" time="0">`,
			`<skipped message="&lt;nil&gt;: Invalid value: null: some validation rules were not checked`,
			`<system-out>warn: deployments must roll out with RollingUpdate`,
		},
	}} {
		t.Run(tc.format, func(t *testing.T) {
			out, errOut, code := runCheck("", "-f", checkManifests, "--rules", checkRules, "-o", tc.format)
			if code != ExitViolations {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, ExitViolations, errOut)
			}
			if !strings.Contains(errOut, "note: 4 built-in objects were judged with the API server's defaults, but without system metadata") {
				t.Errorf("stderr does not say which defaults are not applied:\n%s", errOut)
			}
			if want := `note: binding replica-limit of vap/replica-limit found no params for 1 objects in namespace team-b: no ConfigMap (v1) named "limits" in namespace team-b among the inputs`; !strings.Contains(errOut, want) {
				t.Errorf("stderr does not say which params are missing (%s):\n%s", want, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			switch tc.format {
			case OutputJSON:
				var list map[string]any
				if err := json.Unmarshal([]byte(out), &list); err != nil {
					t.Fatalf("output is not JSON: %v", err)
				}
				out = checkTimestamp.ReplaceAllString(out, `"seconds": 0`)
			case OutputJUnit:
				var doc junitSuites
				if err := xml.Unmarshal([]byte(out), &doc); err != nil {
					t.Fatalf("output is not XML: %v", err)
				}
				// 5 CRD results (4 fail, 1 skip), 2 of replica-limit (fail, error), 1 warning of rolling-updates
				if doc.Tests != 8 || doc.Failures != 6 || doc.Skipped != 1 {
					t.Errorf("testsuites: %d tests, %d failures, %d skipped; want 8, 6, 1", doc.Tests, doc.Failures, doc.Skipped)
				}
			}
			checkGoldenFile(t, tc.golden, out)
		})
	}
}

// TestCheckExitCodes runs check with arguments that must end in each exit code.
func TestCheckExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stdin  string
		code   ExitCode
		stderr string
	}{
		{name: "passing objects", args: []string{"-f", "-", "--rules", checkRules, "--results", "all"}, stdin: webDeployment, code: ExitOK},
		{name: "unmatched objects only", args: []string{"-f", "testdata/check/manifests/more.yaml", "--rules", "testdata/check/rules/widgets-crd.yaml"}, code: ExitOK},
		{name: "a warning passes by default", args: []string{"-f", "-", "--rules", checkRules}, stdin: recreateDeployment, code: ExitOK},
		{name: "a warning fails with --fail-on warn", args: []string{"-f", "-", "--rules", checkRules, "--fail-on", "warn"}, stdin: recreateDeployment, code: ExitViolations},
		{name: "an error rejects", args: []string{"-f", "-", "--rules", checkRules}, stdin: strings.ReplaceAll(webDeployment, "team-a", "team-b"), code: ExitViolations},
		{name: "failures", args: []string{"-f", checkManifests, "--rules", checkRules}, code: ExitViolations},
		{name: "no manifests", args: []string{"--rules", checkRules}, code: ExitBadInput, stderr: "no manifests to check"},
		{name: "unknown format", args: []string{"-f", checkManifests, "-o", "wide"}, code: ExitBadInput, stderr: `unknown output format "wide"`},
		{name: "unknown verdict", args: []string{"-f", checkManifests, "--results", "fail,bad"}, code: ExitBadInput, stderr: `unknown verdict "bad"`},
		{name: "positional arguments", args: []string{checkManifests}, code: ExitBadInput, stderr: "unknown command"},
		{name: "missing file", args: []string{"-f", "testdata/check/nothing.yaml"}, code: ExitBadInput, stderr: "testdata/check/nothing.yaml:0: stat: no such file or directory"},
		{name: "stdin twice", args: []string{"-f", "-", "--rules", "-"}, code: ExitBadInput, stderr: "standard input (-) can be read once"},
		{name: "rules and cluster", args: []string{"-f", checkManifests, "--rules", checkRules, "--cluster"}, code: ExitBadInput, stderr: "--rules and --cluster exclude each other"},
		{name: "cluster is a switch", args: []string{"-f", checkManifests, "--cluster=prod"}, code: ExitBadInput, stderr: `invalid argument "prod" for "--cluster"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runCheck(tc.stdin, tc.args...)
			if code != tc.code {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			if !strings.Contains(errOut, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, errOut)
			}
			if strings.Contains(errOut, "panic") {
				t.Errorf("stderr shows a panic:\n%s", errOut)
			}
		})
	}
}

const webDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: team-a}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: web}]}
`

const recreateDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: tools}
spec:
  strategy: {type: Recreate}
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: api, image: api}]}
`

// TestCheckBadInput checks that each kind of bad input exits with ExitBadInput and says where and why.
func TestCheckBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{{
		name: "unparsable YAML",
		args: []string{"-f", "testdata/check/bad/broken.yaml"},
		want: []string{"testdata/check/bad/broken.yaml:5: yaml: line 9: did not find expected ',' or ']'"},
	}, {
		name: "unknown kind",
		args: []string{"-f", "testdata/check/bad/unknown-kind.yaml"},
		want: []string{"testdata/check/bad/unknown-kind.yaml:5: unknown kind Gadget in gadgets.example.com/v1: no CustomResourceDefinition in the inputs or --rules defines it"},
	}, {
		name: "CRD the API server rejects",
		args: []string{"-f", "testdata/check/manifests/more.yaml", "--rules", "testdata/check/bad/bad-crd.yaml"},
		want: []string{"testdata/check/bad/bad-crd.yaml:1: CustomResourceDefinition gadgets.example.com would be rejected by the API server: spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"},
	}, {
		name: "uncompilable expression",
		args: []string{"-f", "testdata/check/bad/bad-expression.yaml"},
		want: []string{"testdata/check/bad/bad-expression.yaml:5: ValidatingAdmissionPolicy broken-expression: spec.validations[0].expression: compilation error", "Syntax error"},
	}, {
		name: "built-in object that does not decode",
		args: []string{"-f", "-"},
		want: []string{`<stdin>:1: decoding Deployment "bad": json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			stdin := ""
			if tc.args[1] == "-" {
				stdin = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: bad, namespace: tools}\nspec: {replicas: many}\n"
				tc.args = append(tc.args, "--rules", checkRules)
			}
			out, errOut, code := runCheck(stdin, tc.args...)
			if code != ExitBadInput {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, ExitBadInput, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if out != "" {
				t.Errorf("bad input printed results:\n%s", out)
			}
		})
	}
}

// TestCheckStdin checks that manifests read from standard input are judged as the same file would be.
func TestCheckStdin(t *testing.T) {
	data, err := os.ReadFile("testdata/check/manifests/widgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fromFile, _, fileCode := runCheck("", "-f", "testdata/check/manifests/widgets.yaml", "--rules", checkRules)
	fromStdin, errOut, stdinCode := runCheck(string(data), "-f", "-", "--rules", checkRules)
	if stdinCode != fileCode || stdinCode != ExitViolations {
		t.Fatalf("exit codes: file %d, stdin %d, want %d; stderr:\n%s", fileCode, stdinCode, ExitViolations, errOut)
	}
	spaces := regexp.MustCompile(` +`) // the columns are as wide as the sources
	got := spaces.ReplaceAllString(strings.ReplaceAll(fromStdin, "<stdin>", "testdata/check/manifests/widgets.yaml"), " ")
	if want := spaces.ReplaceAllString(fromFile, " "); got != want {
		t.Errorf("stdin and file differ:\n--- stdin\n%s\n--- file\n%s", fromStdin, fromFile)
	}
}

// TestCheckRulesAmongManifests checks that the CRDs, policies, bindings, params and Namespaces among the
// manifests are read as rules, as from --rules (a GitOps repository checks itself), and are also checked as
// objects: the nine objects of the rules directory (3 Namespaces, a ConfigMap of params, 2 policies with
// their bindings and a CRD), which no policy matches.
func TestCheckRulesAmongManifests(t *testing.T) {
	fromRules, _, rulesCode := runCheck("", "-f", checkManifests, "--rules", checkRules)
	together, errOut, code := runCheck("", "-f", checkManifests, "-f", checkRules)
	if code != ExitViolations || rulesCode != ExitViolations {
		t.Fatalf("exit codes: --rules %d, -f %d, want %d; stderr:\n%s", rulesCode, code, ExitViolations, errOut)
	}
	const rulesTotals, togetherTotals = "9 objects checked, 1 matched by no policy.", "18 objects checked, 10 matched by no policy."
	if !strings.Contains(fromRules, rulesTotals) || !strings.Contains(together, togetherTotals) {
		t.Fatalf("totals: --rules\n%s\n-f\n%s\nwant %q and %q", fromRules, together, rulesTotals, togetherTotals)
	}
	if got, want := strings.Replace(together, togetherTotals, rulesTotals, 1), fromRules; got != want {
		t.Errorf("results differ:\n--- rules among the manifests\n%s\n--- --rules\n%s", together, fromRules)
	}
}

// TestCheckCluster checks --cluster against servers that cannot be reached: exit code 3, and --context
// selects the cluster although --cluster is a switch in check.
func TestCheckCluster(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// Port 1 is reserved and closed: connections are refused at once.
	config := `apiVersion: v1
kind: Config
clusters:
- name: one
  cluster: {server: "https://127.0.0.1:1"}
- name: two
  cluster: {server: "https://127.0.0.2:1"}
contexts:
- name: one
  context: {cluster: one, user: u}
- name: two
  context: {cluster: two, user: u}
current-context: one
users:
- name: u
  user: {token: t}
`
	if err := os.WriteFile(kubeconfig, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		server string
	}{
		{name: "current context", args: nil, server: "127.0.0.1:1"},
		{name: "--context", args: []string{"--context", "two"}, server: "127.0.0.2:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-f", checkManifests, "--cluster", "--kubeconfig", kubeconfig}, tc.args...)
			out, errOut, code := runCheck("", args...)
			if code != ExitCluster {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, ExitCluster, out, errOut)
			}
			if !strings.Contains(errOut, "reading the cluster's served resources") || !strings.Contains(errOut, tc.server) {
				t.Errorf("stderr does not say that %s could not be read:\n%s", tc.server, errOut)
			}
		})
	}
}
