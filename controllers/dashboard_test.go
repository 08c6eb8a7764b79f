package controllers_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// dashboardQueries returns every PromQL expression of the dashboard's panels and variables.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "grafana", "celaudit-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("the dashboard is not valid JSON: %v", err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			if target.Expr == "" {
				t.Errorf("panel %q has a target without a query", p.Title)
			}
			out = append(out, target.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok && v.Type == "query" {
			// label_values(metric, label)
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(fmt.Sprint(q["query"]), "label_values("), ")"))
		}
	}
	return out
}

var (
	promqlStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlFunctions = regexp.MustCompile(`\b[a-zA-Z_][a-zA-Z0-9_]*\s*\(`)
	promqlNames     = regexp.MustCompile(`\b[a-zA-Z_:][a-zA-Z0-9_:]*\b`)
)

// metricNames returns the metric names expr selects: what is left once strings, label matchers, ranges,
// grouping clauses, function names and keywords are taken out.
func metricNames(expr string) []string {
	for _, re := range []*regexp.Regexp{promqlStrings, promqlMatchers, promqlRanges, promqlGrouping, promqlFunctions} {
		expr = re.ReplaceAllString(expr, " ")
	}
	var out []string
	for _, name := range promqlNames.FindAllString(expr, -1) {
		switch name {
		case "by", "without", "on", "ignoring", "bool", "offset", "and", "or", "unless", "cluster":
			continue
		}
		out = append(out, name)
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (result) (celaudit_results{cluster=~"$cluster"})`:                                        {"celaudit_results"},
		`histogram_quantile(0.99, sum by (le) (rate(celaudit_list_duration_seconds_bucket{a="b"}[5m])))`: {"celaudit_list_duration_seconds_bucket"},
		`sum(x_total) / count(y{z="{w}"})`:                                                               {"x_total", "y"},
		`celaudit_results, cluster`:                                                                      {"celaudit_results"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %v, want %v", expr, got, want)
		}
	}
}

// TestDashboardQueriesExportedMetrics runs the operator over a violating object and requires every metric the
// dashboard queries to be among those it exports: its own and controller-runtime's.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dash-a", Labels: map[string]string{"dash-audit": "yes"}}},
		labelledConfigMap("dash-a", "bad", nil),
	)
	op, _ := envtestutil.StartOperator(t, env.Config, envtestutil.TestOptions())
	policy, binding := boundPolicy("dash-owner", "has(object.metadata.labels) && 'owner' in object.metadata.labels", "an owner label is required",
		coreRule("configmaps"), []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("dash-audit")})
	bindFirst(t, binding, func() { create(t, policy) })
	deleteAfter(t, binding, policy)

	exported := map[string]bool{}
	envtestutil.Eventually(t, time.Minute, func() error {
		own := prometheus.NewPedanticRegistry()
		for _, c := range controllers.Collectors(op) {
			if err := own.Register(c); err != nil {
				return err
			}
		}
		for _, g := range []prometheus.Gatherer{own, metrics.Registry} {
			families, err := g.Gather()
			if err != nil {
				return err
			}
			for _, f := range families {
				exported[f.GetName()] = true
				if f.GetType().String() == "HISTOGRAM" {
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						exported[f.GetName()+suffix] = true
					}
				}
			}
		}
		// Wait for what only an audit with a violation and a report write exports.
		for _, name := range []string{"celaudit_namespace_violations", "celaudit_report_writes_total", "celaudit_list_duration_seconds"} {
			if !exported[name] {
				return fmt.Errorf("%s not exported yet", name)
			}
		}
		return nil
	})
	queried := 0
	for _, q := range dashboardQueries(t) {
		names := metricNames(q)
		if len(names) == 0 {
			t.Errorf("query %q names no metric", q)
		}
		for _, name := range names {
			queried++
			if !exported[name] {
				t.Errorf("query %q names %s, which the operator does not export", q, name)
			}
		}
	}
	if queried < 15 {
		t.Errorf("only %d metric names found in the dashboard's queries", queried)
	}
}
