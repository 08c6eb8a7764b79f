package controllers_test

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/internal/report"
)

// apply leaves, for the next reconcile, every report it wrote at the resourceVersion the API server returned,
// and every report it deleted as gone.
func TestApplyRecordsExpectations(t *testing.T) {
	ctx := context.Background()
	const ns = "apply-expectations"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	reportNamed := func(name string) v1alpha2.PolicyReport {
		return v1alpha2.PolicyReport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	}
	old := reportNamed("old")
	if err := env.Client.Create(ctx, &old); err != nil {
		t.Fatal(err)
	}
	r := &controllers.ReportReconciler{Client: env.Client, Clock: clock.RealClock{}}
	var changes report.Changes
	changes.PolicyReports.Create = []v1alpha2.PolicyReport{reportNamed("new")}
	changed := *old.DeepCopy()
	changed.Labels = map[string]string{"changed": "yes"}
	changes.PolicyReports.Update = []v1alpha2.PolicyReport{changed}
	expected, err := r.ApplyForTest(ctx, ns, changes)
	if err != nil {
		t.Fatal(err)
	}
	created, updated := changes.PolicyReports.Create[0].ResourceVersion, changes.PolicyReports.Update[0].ResourceVersion
	if created == "" || updated == "" || updated == old.ResourceVersion {
		t.Fatalf("the writes returned resourceVersions %q and %q (before the update: %q)", created, updated, old.ResourceVersion)
	}
	if got, want := expected, map[string]string{"new": created, "old": updated}; !reflect.DeepEqual(got, want) {
		t.Fatalf("expected after writing: %v, want %v", got, want)
	}

	written := changes.PolicyReports.Create[0] // as the cache holds it, with its resourceVersion
	changes = report.Changes{}
	changes.PolicyReports.Delete = []v1alpha2.PolicyReport{written}
	if expected, err = r.ApplyForTest(ctx, ns, changes); err != nil {
		t.Fatal(err)
	}
	if got, want := expected, map[string]string{"new": ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("expected after deleting: %v, want %v", got, want)
	}
}
