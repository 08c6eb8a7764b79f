package envtestutil

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/controllers"
)

// ReportResults reads the PolicyReports of namespaces (every namespace when none is given) and the
// ClusterPolicyReports, and returns one line per result: scope, policy, rule, resource, result, message and
// properties. Lines are sorted and keep duplicates, so two audits that wrote the same results compare equal
// however the results were chunked into reports and whenever they were written.
func ReportResults(ctx context.Context, c client.Reader, namespaces ...string) ([]string, error) {
	var lines []string
	var cluster v1alpha2.ClusterPolicyReportList
	if err := c.List(ctx, &cluster); err != nil {
		return nil, fmt.Errorf("listing ClusterPolicyReports: %w", err)
	}
	for i := range cluster.Items {
		lines = appendResultLines(lines, "", cluster.Items[i].Results)
	}
	var reports v1alpha2.PolicyReportList
	if err := c.List(ctx, &reports); err != nil {
		return nil, fmt.Errorf("listing PolicyReports: %w", err)
	}
	for i := range reports.Items {
		r := &reports.Items[i]
		if len(namespaces) > 0 && !slices.Contains(namespaces, r.Namespace) {
			continue
		}
		lines = appendResultLines(lines, r.Namespace, r.Results)
	}
	sort.Strings(lines)
	return lines, nil
}

func appendResultLines(lines []string, scope string, results []v1alpha2.PolicyReportResult) []string {
	for _, r := range results {
		resources := make([]string, 0, len(r.Resources))
		for _, o := range r.Resources {
			resources = append(resources, fmt.Sprintf("%s/%s/%s/%s/%s", o.APIVersion, o.Kind, o.Namespace, o.Name, o.UID))
		}
		props := make([]string, 0, len(r.Properties))
		for k, v := range r.Properties {
			props = append(props, k+"="+v)
		}
		sort.Strings(props)
		lines = append(lines, strings.Join([]string{scope, r.Source, r.Policy, r.Rule, strings.Join(resources, ","),
			string(r.Result), string(r.Severity), r.Message, strings.Join(props, ",")}, " | "))
	}
	return lines
}

// AssertFreshAuditAgrees is how a fault scenario ends: the reports celaudit wrote through the fault must equal,
// result by result, the reports a fresh celaudit writes for the final state. The operator that lived through
// the fault must be stopped first. AssertFreshAuditAgrees reads the reports, deletes them, runs a new operator
// with opts as cfg until it settles, reads its reports and compares. admin reads and deletes the reports.
func AssertFreshAuditAgrees(t testing.TB, admin client.Client, cfg *rest.Config, opts controllers.Options,
	namespaces ...string) {
	t.Helper()
	ctx := context.Background()
	got, err := ReportResults(ctx, admin, namespaces...)
	if err != nil {
		t.Fatalf("reading the reports written through the fault: %v", err)
	}
	if err := deleteReports(ctx, admin, namespaces); err != nil {
		t.Fatalf("deleting reports before the fresh audit: %v", err)
	}
	op, stop := StartOperator(t, cfg, opts)
	WaitSettled(t, op)
	var want []string
	Eventually(t, 2*time.Minute, func() error {
		want, err = ReportResults(ctx, admin, namespaces...)
		if err != nil {
			return err
		}
		if len(want) == 0 && len(got) != 0 {
			return fmt.Errorf("the fresh audit has written no results yet")
		}
		return nil
	})
	stop()
	if !slices.Equal(got, want) {
		t.Errorf("reports written through the fault differ from a fresh audit of the final state:\n%s",
			lineDiff(got, want))
	}
}

func deleteReports(ctx context.Context, c client.Client, namespaces []string) error {
	if err := c.DeleteAllOf(ctx, &v1alpha2.ClusterPolicyReport{}); err != nil {
		return fmt.Errorf("deleting ClusterPolicyReports: %w", err)
	}
	if len(namespaces) == 0 {
		var reports v1alpha2.PolicyReportList
		if err := c.List(ctx, &reports); err != nil {
			return fmt.Errorf("listing PolicyReports: %w", err)
		}
		for i := range reports.Items {
			namespaces = append(namespaces, reports.Items[i].Namespace)
		}
	}
	for _, ns := range namespaces {
		if err := c.DeleteAllOf(ctx, &v1alpha2.PolicyReport{}, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("deleting PolicyReports in %s: %w", ns, err)
		}
	}
	return nil
}

// lineDiff lists the lines only one side has; both are sorted.
func lineDiff(got, want []string) string {
	var b strings.Builder
	i, j := 0, 0
	for i < len(got) || j < len(want) {
		switch {
		case j == len(want) || (i < len(got) && got[i] < want[j]):
			fmt.Fprintf(&b, "  only through the fault: %s\n", got[i])
			i++
		case i == len(got) || want[j] < got[i]:
			fmt.Fprintf(&b, "  only in the fresh audit: %s\n", want[j])
			j++
		default:
			i++
			j++
		}
	}
	return b.String()
}
