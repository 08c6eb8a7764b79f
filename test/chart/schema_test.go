package chart_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// badValues are the values files of testdata/values that the schema must reject, each with what the error must
// say: the JSON pointer of the offending key (Helm's "at '/a/b'") and the reason.
var badValues = []struct {
	file string
	want []string
}{
	{"bad-typo-top-level-key.yaml", []string{"at ''", "additional properties 'replicaCont' not allowed"}},
	{"bad-typo-nested-key.yaml", []string{"at '/audit'", "additional properties 'resyncPeriode' not allowed"}},
	{"bad-type-boolean.yaml", []string{"at '/leaderElection/enabled'", "got string, want boolean"}},
	{"bad-type-replicas-string.yaml", []string{"at '/replicaCount'", "got string, want integer"}},
	{"bad-type-annotation-number.yaml", []string{"at '/podAnnotations/prometheus.io~1port'", "got number, want string"}},
	{"bad-enum-report-api.yaml", []string{"at '/reports/api'", "value must be one of 'wgpolicy', 'openreports', 'both'"}},
	{"bad-enum-read-access.yaml", []string{"at '/rbac/readAccess'", "value must be one of 'wildcard', 'restricted'"}},
	{"bad-typo-extra-rule.yaml", []string{"at '/rbac/restricted/extraRules/0'", "additional properties 'verb' not allowed"}},
	{"bad-type-lease-duration.yaml", []string{"at '/leaderElection/leaseDuration'", "got number, want null or string"}},
	{"bad-enum-log-level.yaml", []string{"at '/logLevel'", "'verbose' does not match pattern"}},
	{"bad-enum-pull-policy.yaml", []string{"at '/image/pullPolicy'", "value must be one of 'Always', 'IfNotPresent', 'Never'"}},
	{"bad-enum-report-results.yaml", []string{"at '/reports/results/1'", "value must be one of 'pass', 'fail', 'warn', 'error', 'skip'"}},
	{"bad-negative-workers.yaml", []string{"at '/audit/workers'", "minimum: got -1, want 1"}},
	{"bad-zero-replicas.yaml", []string{"at '/replicaCount'", "minimum: got 0, want 1"}},
	{"bad-negative-qps.yaml", []string{"at '/kubeAPI/qps'", "exclusiveMinimum: got -5, want 0"}},
	{"bad-port-range.yaml", []string{"at '/metrics/service/port'", "maximum: got 70,000, want 65,535"}},
	{"bad-report-bytes-over-etcd-limit.yaml", []string{"at '/reports/maxReportBytes'", "maximum: got 2"}},
	{"bad-duration-days.yaml", []string{"at '/audit/resyncPeriod'", "'1d' does not match pattern"}},
	{"bad-duration-scrape-interval.yaml", []string{"at '/metrics/serviceMonitor/interval'", "'30 seconds' does not match pattern"}},
	{"bad-exempt-resource.yaml", []string{"at '/admissionPolicies/exempt/resources/0'", "'configmaps' does not match pattern"}},
	{"bad-type-sharding-enabled.yaml", []string{"at '/sharding/enabled'", "got string, want boolean"}},
	{"bad-typo-sharding-key.yaml", []string{"at '/sharding'", "additional properties 'enable' not allowed"}},
	{"bad-negative-max-unavailable.yaml", []string{"at '/sharding/podDisruptionBudget/maxUnavailable'", "minimum: got -1, want 1"}},
	{"bad-zero-max-unavailable.yaml", []string{"at '/sharding/podDisruptionBudget/maxUnavailable'", "minimum: got 0, want 1"}},
	{"bad-percent-max-unavailable.yaml", []string{"at '/sharding/podDisruptionBudget/maxUnavailable'", "'150%' does not match pattern"}},
}

// TestSchemaRejectsBadValues checks that each bad values file fails both `helm lint --strict` and `helm
// template` (which `helm install` runs first) with a message naming the offending key.
func TestSchemaRejectsBadValues(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "values", "bad-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tested []string
	for _, tc := range badValues {
		tested = append(tested, filepath.Join("testdata", "values", tc.file))
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			values := filepath.Join("testdata", "values", tc.file)
			for _, cmd := range [][]string{
				{"lint", "--strict", chartDir, "-f", values},
				{"template", release, chartDir, "--namespace", namespace, "-f", values},
			} {
				_, err := helm(t, cmd...)
				if err == nil {
					t.Errorf("helm %s passed; want a schema error", cmd[0])
					continue
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("helm %s: the error lacks %q:\n%v", cmd[0], w, err)
					}
				}
			}
		})
	}
	sort.Strings(files)
	sort.Strings(tested)
	if !slices.Equal(files, tested) {
		t.Errorf("testdata/values/bad-*.yaml are %v; the table tests %v", files, tested)
	}
}

// TestSchemaAcceptsEveryForm lints the good values files, which use each accepted form of the values that take
// several (a list or a comma-separated string, null, an integer or a name), with the strict linter.
func TestSchemaAcceptsEveryForm(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "values", "good-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/values/good-*.yaml")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			mustHelm(t, "lint", "--strict", chartDir, "-f", f)
			render(t, "-f", f)
		})
	}
}

// openShapes are the values whose keys are not ours: Kubernetes objects passed through to the Deployment or
// the ServiceMonitor, which the API server validates, and Helm's global. Maps whose keys are free but whose
// values must be strings (labels, annotations, nodeSelector) are not listed: the schema types their values.
var openShapes = []string{
	"global", "podSecurityContext", "securityContext", "resources", "affinity", "metrics.serviceMonitor.tlsConfig",
}

// schemaNode is the part of a JSON schema the coverage test reads.
type schemaNode struct {
	Type                 any                    `json:"type"`
	Description          string                 `json:"description"`
	Properties           map[string]*schemaNode `json:"properties"`
	AdditionalProperties any                    `json:"additionalProperties"`
}

// TestSchemaCoversValues checks the schema against values.yaml: every value is typed and described, every
// object whose keys are ours rejects unknown keys, and the schema describes no key that values.yaml lacks.
func TestSchemaCoversValues(t *testing.T) {
	t.Parallel()
	var root schemaNode
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &root); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var values map[string]any
	data, err = os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	checkSchemaNode(t, "", &root, values)
}

func checkSchemaNode(t *testing.T, path string, node *schemaNode, values map[string]any) {
	t.Helper()
	if node.AdditionalProperties != false {
		t.Errorf("%s: additionalProperties is %v; want false, so that a misspelt key fails", orRoot(path), node.AdditionalProperties)
	}
	for key, value := range values {
		p := strings.TrimPrefix(path+"."+key, ".")
		child := node.Properties[key]
		if child == nil {
			t.Errorf("%s is in values.yaml but not in values.schema.json", p)
			continue
		}
		if child.Type == nil || child.Description == "" {
			t.Errorf("%s: type %v, description %q; want both", p, child.Type, child.Description)
		}
		if slices.Contains(openShapes, p) {
			if child.Type != "object" || child.Properties != nil || child.AdditionalProperties != nil {
				t.Errorf("%s: want an open object, the Kubernetes shape left to the API server", p)
			}
			continue
		}
		m, isMap := value.(map[string]any)
		switch {
		case isMap && child.Properties != nil:
			checkSchemaNode(t, p, child, m)
		case child.Type == "object" && child.Properties == nil:
			// A map of free keys (labels, annotations, nodeSelector): its values must be typed.
			extra, _ := child.AdditionalProperties.(map[string]any)
			if extra["type"] == nil {
				t.Errorf("%s: free keys with untyped values; want additionalProperties: {type: ...} or an entry in openShapes", p)
			}
		}
	}
	for key := range node.Properties {
		p := strings.TrimPrefix(path+"."+key, ".")
		if _, ok := values[key]; !ok && p != "global" {
			t.Errorf("values.schema.json describes %s, which values.yaml lacks", p)
		}
	}
}

func orRoot(path string) string {
	if path == "" {
		return "the root"
	}
	return path
}
