package controllers_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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

// MaxHold counts from the end of the writes: a namespace whose writes took longer than MaxHold still waits
// for the cache to show them.
func TestExpectationsOutlastSlowWrites(t *testing.T) {
	ctx := context.Background()
	const ns = "slow-writes"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	watching, err := client.NewWithWatch(env.Config, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC))
	// Each create takes, by the reconciler's clock, longer than MaxHold.
	slow := interceptor.NewClient(watching, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			clk.Step(15 * time.Second)
			return c.Create(ctx, obj, opts...)
		},
	})
	r := &controllers.ReportReconciler{Client: slow, Clock: clk, MaxHold: 10 * time.Second}
	var changes report.Changes
	changes.PolicyReports.Create = []v1alpha2.PolicyReport{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}},
	}
	if _, err := r.ApplyForTest(ctx, ns, changes); err != nil {
		t.Fatal(err)
	}
	if !r.AwaitingCacheForTest(ns, report.Reports{}) {
		t.Fatal("the writes are no longer awaited although the cache shows none of them")
	}
	clk.Step(10 * time.Second)
	if r.AwaitingCacheForTest(ns, report.Reports{}) {
		t.Fatal("the writes are still awaited MaxHold after they ended")
	}
}
