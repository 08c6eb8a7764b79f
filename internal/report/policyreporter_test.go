package report_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/manifests"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/views"
)

// metricKey is the key of Policy Reporter's per-result metric policy_report_result: results of one report
// that share it are merged into one series, so a fail or warn would go uncounted.
type metricKey struct {
	policy, rule, kind, name, namespace, status, severity, category, source string
}

func metricKeyOf(r v1alpha2.PolicyReportResult) metricKey {
	k := metricKey{
		policy: r.Policy, rule: r.Rule, status: string(r.Result),
		severity: string(r.Severity), category: r.Category, source: r.Source,
	}
	if len(r.Resources) > 0 {
		k.kind, k.name, k.namespace = r.Resources[0].Kind, r.Resources[0].Name, r.Resources[0].Namespace
	}
	return k
}

// allVerdicts lists every verdict, passes included, as --report-results=pass,fail,warn,error,skip does.
func allVerdicts() []audit.Verdict {
	return []audit.Verdict{audit.Pass, audit.Fail, audit.Warn, audit.Error, audit.Skip}
}

// evaluateFile compiles the rule sources of a testdata file and evaluates its other objects with them, as
// kubectl-celaudit check does.
func evaluateFile(t *testing.T, path string) []audit.Result {
	t.Helper()
	objs, err := manifests.Reader{}.Read([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		all = append(all, o.Unstructured)
	}
	resources, err := views.FileResources(all)
	if err != nil {
		t.Fatal(err)
	}
	namespaces, err := views.NewFileNamespaces(all)
	if err != nil {
		t.Fatal(err)
	}
	v := engine.Views{Resources: resources, Namespaces: namespaces, Params: views.NewFileParams(all)}
	policies, err := engine.Compiler{}.Compile(all, v)
	if err != nil {
		t.Fatal(err)
	}
	set := engine.NewSet(policies...)
	var results []audit.Result
	for _, o := range all {
		if engine.IsPolicyObject(o) || o.GetKind() == "Namespace" || o.GetKind() == "ConfigMap" {
			continue
		}
		res, err := v.Resources.ResourceForKind(o.GroupVersionKind())
		if err != nil {
			t.Fatal(err)
		}
		obj := engine.NewObject(res.Resource, o)
		for _, p := range set.For(res.Resource) {
			results = append(results, obj.Evaluate(context.Background(), p)...)
		}
	}
	return results
}

// TestPolicyReporterMetricKeys builds reports, passes listed, from real evaluations whose results Policy
// Reporter would merge were they named by their rule alone, and checks that no two results of one report
// share Policy Reporter's metric key: two OpenAPI errors of one object, two errors of one type on one field,
// a rule of list items failing on two items, a binding whose paramRef selects two params that both fail, and
// one object matched by two bindings of one policy.
func TestPolicyReporterMetricKeys(t *testing.T) {
	results := evaluateFile(t, "testdata/policyreporter.yaml")
	reports := report.BuildCounted(results, nil, nil, time.Unix(0, 0), report.Options{ListVerdicts: allVerdicts()})
	if len(reports.PolicyReports) == 0 {
		t.Fatal("no reports")
	}
	listed := 0
	for _, r := range reports.PolicyReports {
		seen := map[metricKey]v1alpha2.PolicyReportResult{}
		for _, res := range r.Results {
			listed++
			k := metricKeyOf(res)
			if prev, dup := seen[k]; dup {
				t.Errorf("report %s/%s: results share the metric key %+v:\n  %q\n  %q", r.Namespace, r.Name, k, prev.Message, res.Message)
			}
			seen[k] = res
		}
	}
	if listed != len(results) {
		t.Errorf("%d results listed of %d evaluated", listed, len(results))
	}

	// The cases the fixture sets up are there: each finding below is a result of its own.
	want := []struct{ policy, rule string }{
		{"gadgets.example.com", "schema: spec.replicas (Invalid value, version v1)"},
		{"gadgets.example.com", "schema: spec.size (Unsupported value, version v1)"},
		{"gadgets.example.com", "schema: spec.count (Invalid value, version v1)"},
		{"gadgets.example.com", "schema: spec.count (Invalid value, version v1) #2"},
		{"gadgets.example.com", "spec.ports[*].x-kubernetes-validations[0] (at spec.ports[0], version v1)"},
		{"gadgets.example.com", "spec.ports[*].x-kubernetes-validations[0] (at spec.ports[1], version v1)"},
		{"replica-limit", "validations[0] (binding limits-by-tier, param team-a/small)"},
		{"replica-limit", "validations[0] (binding limits-by-tier, param team-a/tiny)"},
		{"labelled", "validations[0] (binding labelled-audit)"},
		{"labelled", "validations[0] (binding labelled-warn)"},
	}
	got := map[[2]string]bool{}
	for _, r := range results {
		got[[2]string{r.Policy, r.Rule}] = true
	}
	for _, w := range want {
		if !got[[2]string{w.policy, w.rule}] {
			t.Errorf("no result of %s named %q", w.policy, w.rule)
		}
	}
}

// TestPassesNamed checks that listed passes, of CRDs and ValidatingAdmissionPolicies, have a rule name and a
// message: Policy Reporter shows both.
func TestPassesNamed(t *testing.T) {
	results := evaluateFile(t, "testdata/policyreporter.yaml")
	reports := report.BuildCounted(results, nil, nil, time.Unix(0, 0), report.Options{ListVerdicts: []audit.Verdict{audit.Pass}})
	passes := map[string]v1alpha2.PolicyReportResult{}
	for _, r := range reports.PolicyReports {
		for _, res := range r.Results {
			passes[res.Policy+" "+res.Rule] = res
		}
	}
	cases := []struct {
		name    string
		key     string // policy and rule
		message string
	}{
		{"CRD", "gadgets.example.com validation (version v1)", "object satisfies the validation of gadgets.example.com v1"},
		{"VAP per param", "replica-limit validations (binding limits-by-tier, param team-a/small)", "object satisfies the 1 validation evaluated"},
		{"VAP per binding", "labelled validations (binding labelled-warn)", "object satisfies the 2 validations evaluated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, ok := passes[c.key]
			if !ok {
				t.Fatalf("no pass %q among %d", c.key, len(passes))
			}
			if res.Message != c.message {
				t.Errorf("message %q, want %q", res.Message, c.message)
			}
		})
	}
	for key, res := range passes {
		if strings.TrimSpace(res.Rule) == "" || strings.TrimSpace(res.Message) == "" {
			t.Errorf("pass %q: rule %q, message %q: want both", key, res.Rule, res.Message)
		}
	}
}

// TestNoBlankResource checks that a result about no object is published without a blank resource, which
// Policy Reporter would show as an object without kind or name: a reference that names what it knows (a
// resource's apiVersion and kind) is kept, an empty one is left out.
func TestNoBlankResource(t *testing.T) {
	cases := []struct {
		name string
		ref  audit.ObjectRef
		want int // resources published
	}{
		{"object", audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "cm", UID: "u"}, 1},
		{"resource", audit.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment"}, 1},
		{"nothing", audit.ObjectRef{}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := audit.Result{Policy: "p", Rule: audit.RuleRead, Verdict: audit.Error, Message: "m", Resource: c.ref}
			reports := report.BuildCounted([]audit.Result{res}, nil, nil, time.Unix(0, 0), report.Options{})
			var listed []v1alpha2.PolicyReportResult
			for _, r := range reports.ClusterPolicyReports {
				listed = append(listed, r.Results...)
			}
			for _, r := range reports.PolicyReports {
				listed = append(listed, r.Results...)
			}
			if len(listed) != 1 {
				t.Fatalf("%d results listed, want 1", len(listed))
			}
			got := listed[0].Resources
			if len(got) != c.want {
				t.Fatalf("resources %+v: want %d", got, c.want)
			}
			for _, r := range got {
				if r.APIVersion == "" && r.Kind == "" && r.Name == "" {
					t.Errorf("blank resource %+v", r)
				}
			}
		})
	}
}

// TestEveryReportHasASource checks that Policy Reporter finds the source "celaudit" on every report, which it
// needs to list a report under celaudit and its namespace at all. It reads a PolicyReport's source from its
// first result, and an OpenReports Report's from the top-level source. So: with passes listed, every
// PolicyReport lists a result; with OpenReports, every Report carries the source, even one that lists
// nothing (a namespace where everything passes, passes only counted). With PolicyReports and passes only
// counted, such a report has no source for Policy Reporter: the README says to choose one of the two above.
func TestEveryReportHasASource(t *testing.T) {
	results := evaluateFile(t, "testdata/policyreporter.yaml")
	// A namespace where both objects pass everything: its passes are only counted by default.
	quiet := report.CountedPasses{"quiet": {"uid-1": 2, "uid-2": 1}}
	for _, r := range results {
		if r.Resource.Namespace == "quiet" {
			t.Fatal("the fixture must not use the namespace quiet")
		}
	}
	allPass := append(slices.Clone(results),
		audit.Result{Policy: "labelled", Rule: "validations (binding b)", Verdict: audit.Pass, Message: "m",
			Resource: audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "quiet", Name: "a", UID: "uid-1"}},
		audit.Result{Policy: "labelled", Rule: "validations (binding b)", Verdict: audit.Pass, Message: "m",
			Resource: audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "quiet", Name: "b", UID: "uid-2"}})

	t.Run("PolicyReports with passes listed", func(t *testing.T) {
		reports := report.BuildCounted(allPass, nil, nil, time.Unix(0, 0), report.Options{ListVerdicts: allVerdicts()})
		sawQuiet := false
		for _, r := range reports.PolicyReports {
			sawQuiet = sawQuiet || r.Namespace == "quiet"
			if len(r.Results) == 0 || r.Results[0].Source != audit.Source {
				t.Errorf("PolicyReport %s/%s: Policy Reporter would read source %q", r.Namespace, r.Name, policyReporterSource(r.Results))
			}
		}
		if !sawQuiet {
			t.Error("no report for the namespace where everything passes")
		}
	})
	t.Run("OpenReports with passes counted", func(t *testing.T) {
		open := report.ToOpenReports(report.BuildCounted(results, quiet, nil, time.Unix(0, 0), report.Options{}))
		sawEmpty := false
		for _, r := range open.Reports {
			sawEmpty = sawEmpty || len(r.Results) == 0
			if r.Source != audit.Source {
				t.Errorf("Report %s/%s: source %q, want %q", r.Namespace, r.Name, r.Source, audit.Source)
			}
		}
		for _, r := range open.ClusterReports {
			if r.Source != audit.Source {
				t.Errorf("ClusterReport %s: source %q, want %q", r.Name, r.Source, audit.Source)
			}
		}
		if !sawEmpty {
			t.Error("no Report that lists nothing: the namespace where everything passes is missing")
		}
	})
}

// policyReporterSource is the source Policy Reporter gives a PolicyReport: its first result's.
func policyReporterSource(results []v1alpha2.PolicyReportResult) string {
	if len(results) == 0 {
		return ""
	}
	return results[0].Source
}
