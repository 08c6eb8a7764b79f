package controllers

import (
	"context"
	"maps"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/report"
)

func TestCacheShows(t *testing.T) {
	reports := func(nameRV ...string) report.Reports {
		var out report.Reports
		for i := 0; i < len(nameRV); i += 2 {
			out.PolicyReports = append(out.PolicyReports, v1alpha2.PolicyReport{
				ObjectMeta: metav1.ObjectMeta{Name: nameRV[i], ResourceVersion: nameRV[i+1]},
			})
		}
		return out
	}
	cluster := report.Reports{ClusterPolicyReports: []v1alpha2.ClusterPolicyReport{
		{ObjectMeta: metav1.ObjectMeta{Name: "c", ResourceVersion: "7"}},
	}}
	for _, tc := range []struct {
		name     string
		existing report.Reports
		want     map[string]string
		shows    bool
	}{
		{"nothing expected", reports("a", "1"), nil, true},
		{"created, not yet seen", reports("a", "1"), map[string]string{"a": "1", "b": "5"}, false},
		{"created and seen", reports("a", "1", "b", "5"), map[string]string{"b": "5"}, true},
		{"updated, old version cached", reports("a", "4"), map[string]string{"a": "5"}, false},
		{"updated, later version cached", reports("a", "6"), map[string]string{"a": "5"}, true},
		{"versions compared as numbers", reports("a", "10"), map[string]string{"a": "9"}, true},
		{"deleted, still cached", reports("a", "1"), map[string]string{"a": ""}, false},
		{"deleted and gone", reports("b", "1"), map[string]string{"a": ""}, true},
		{"opaque versions must be equal", reports("a", "x2"), map[string]string{"a": "x1"}, false},
		{"opaque version seen", reports("a", "x1"), map[string]string{"a": "x1"}, true},
		{"cluster reports", cluster, map[string]string{"c": "7"}, true},
		{"cluster report not yet seen", cluster, map[string]string{"c": "8"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cacheShows(tc.existing, tc.want); got != tc.shows {
				t.Fatalf("cacheShows = %v, want %v", got, tc.shows)
			}
		})
	}
}

// ApplyForTest writes changes as a reconcile of namespace does and returns the writes it then expects the
// cache to show. Unset settings take the defaults SetupWithManager gives them.
func (r *ReportReconciler) ApplyForTest(ctx context.Context, namespace string, changes report.Changes) (map[string]string, error) {
	r.defaults()
	_, err := r.apply(ctx, namespace, changes)
	return maps.Clone(r.gate.namespaces[namespace].expected.reports), err
}

// ReconcileForTest reconciles namespace's reports once, as the controller does.
func (r *ReportReconciler) ReconcileForTest(ctx context.Context, namespace string) (ctrl.Result, error) {
	r.defaults()
	return r.Reconcile(ctx, reportRequest(namespace))
}

// AwaitingCacheForTest reports whether a reconcile of namespace would wait for the cache to show its last
// writes, given the reports the cache holds.
func (r *ReportReconciler) AwaitingCacheForTest(namespace string, existing report.Reports) bool {
	in := writeInputs{now: r.Clock.Now(), existing: existing, firstAuditDone: true}
	return r.gate.decide(namespace, in, r.limits()).wait == waitCache
}
