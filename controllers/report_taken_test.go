package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// managedReportNames returns the names of celaudit's PolicyReports in namespace, sorted.
func managedReportNames(ctx context.Context, namespace string) ([]string, error) {
	list := &v1alpha2.PolicyReportList{}
	if err := env.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{"app.kubernetes.io/managed-by": "celaudit"}); err != nil {
		return nil, err
	}
	var names []string
	for _, r := range list.Items {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names, nil
}

// expectReportNames waits until celaudit's PolicyReports in namespace are exactly names.
func expectReportNames(t *testing.T, namespace string, names ...string) {
	t.Helper()
	expectStrings(t, "celaudit's reports in "+namespace, func(ctx context.Context) ([]string, error) {
		return managedReportNames(ctx, namespace)
	}, names)
}

// expectNameTakenEvent waits for the Warning Event celaudit records on the PolicyReport namespace/name, which
// it does not own, and returns how many such Events there are.
func expectNameTakenEvent(t *testing.T, namespace, name string) int {
	t.Helper()
	var n int
	envtestutil.Eventually(t, 30*time.Second, func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(namespace)); err != nil {
			return err
		}
		n = 0
		for _, e := range list.Items {
			if e.Regarding.Kind == "PolicyReport" && e.Regarding.Name == name && e.Type == corev1.EventTypeWarning &&
				e.Reason == "ReportNameTaken" && e.ReportingController == "celaudit" {
				n++
			}
		}
		if n == 0 {
			return fmt.Errorf("no ReportNameTaken Warning Event on PolicyReport %s/%s among %d Events", namespace, name, len(list.Items))
		}
		return nil
	})
	return n
}

// getReport returns the PolicyReport namespace/name as the API server holds it.
func getReport(t *testing.T, namespace, name string) *v1alpha2.PolicyReport {
	t.Helper()
	r := &v1alpha2.PolicyReport{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// A PolicyReport named celaudit that celaudit did not write is left alone: celaudit publishes the namespace's
// results under another name after a single refused create, says so with a Warning Event on that report, and
// writes nothing more there than its results need, also after a restart. It used to retry the create every
// second, forever and silently, and never publish the namespace's results.
func TestForeignReportHoldingTheName(t *testing.T) {
	ctx := context.Background()
	const ns, other, label = "taken-a", "taken-b", "taken-audit"
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other, Labels: map[string]string{label: "yes"}}},
		configMap(ns, "bad", map[string]string{"size": "1"}),
		configMap(ns, "good", map[string]string{"owner": "a"}),
		configMap(other, "sentinel", map[string]string{"owner": "b"}),
	)
	theirs := &v1alpha2.PolicyReport{
		ObjectMeta: metav1.ObjectMeta{Name: "celaudit", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "someone-else"}},
		Summary:    v1alpha2.PolicyReportSummary{Fail: 42},
		Results: []v1alpha2.PolicyReportResult{{
			Source: "another-tool", Policy: "their-policy", Result: v1alpha2.StatusFail, Message: "their own finding",
			Timestamp: metav1.Timestamp{Seconds: 1_700_000_000},
		}},
	}
	create(t, theirs)
	original := getReport(t, ns, "celaudit")
	ownerPolicy(t, "taken-owner", label)

	counter := &envtestutil.RequestCounter{}
	op, stop := envtestutil.StartOperator(t, counter.Wrap(env.Config), envtestutil.TestOptions())
	envtestutil.WaitSettled(t, op)

	// The results are published, under the first alternative name.
	expectReport(t, ns, 1, "warn bad: "+ownerMessage)
	expectReportNames(t, ns, "celaudit.1")
	expectNameTakenEvent(t, ns, "celaudit")

	// Later changes are written to that report; a change elsewhere, published after them, shows that the
	// operator had every chance to write more.
	update(t, configMap(ns, "good", nil), func(c *corev1.ConfigMap) { delete(c.Data, "owner") })
	expectReport(t, ns, 0, "warn bad: "+ownerMessage, "warn good: "+ownerMessage)
	update(t, configMap(other, "sentinel", nil), func(c *corev1.ConfigMap) { delete(c.Data, "owner") })
	expectReport(t, other, 0, "warn sentinel: "+ownerMessage)
	expectReportNames(t, ns, "celaudit.1")

	if got := counter.StatusIn("create", "policyreports", ns, http.StatusConflict); got != 1 {
		t.Errorf("%d creates of PolicyReports in %s refused as conflicting, want 1", got, ns)
	}
	if got := counter.GetIn("create", "policyreports", ns); got != 2 {
		t.Errorf("%d creates of PolicyReports in %s, want 2: the refused one and celaudit.1", got, ns)
	}
	if got := counter.GetIn("delete", "policyreports", ns); got != 0 {
		t.Errorf("%d deletes of PolicyReports in %s, want none", got, ns)
	}
	assertUntouched(t, original)

	// A restart finds the alternative name in use and keeps it, without trying the taken name again.
	stop()
	restarted := &envtestutil.RequestCounter{}
	op, _ = envtestutil.StartOperator(t, restarted.Wrap(env.Config), envtestutil.TestOptions())
	envtestutil.WaitSettled(t, op)
	update(t, configMap(other, "sentinel", nil), func(c *corev1.ConfigMap) { c.Data = map[string]string{"owner": "b"} })
	expectReport(t, other, 1)
	if w := reportWritesIn(restarted, ns); w != 0 {
		t.Errorf("the restarted operator wrote PolicyReports in %s %d times: %v", ns, w, restarted.Snapshot())
	}
	expectReportNames(t, ns, "celaudit.1")
	expectReport(t, ns, 0, "warn bad: "+ownerMessage, "warn good: "+ownerMessage)
	assertUntouched(t, original)
	if err := env.Client.Delete(ctx, theirs); err != nil {
		t.Fatal(err)
	}
}

// A report of celaudit's whose managed-by label someone removes is no longer celaudit's: it is left as it is,
// and the namespace's results are published under another name.
func TestReportWhoseLabelIsRemoved(t *testing.T) {
	const ns, label = "taken-relabel", "taken-relabel-audit"
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}},
		configMap(ns, "bad", map[string]string{"size": "1"}),
	)
	ownerPolicy(t, "taken-relabel-owner", label)
	counter := &envtestutil.RequestCounter{}
	op, _ := envtestutil.StartOperator(t, counter.Wrap(env.Config), envtestutil.TestOptions())
	envtestutil.WaitSettled(t, op)
	expectReport(t, ns, 0, "warn bad: "+ownerMessage)
	expectReportNames(t, ns, "celaudit")

	update(t, &v1alpha2.PolicyReport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "celaudit"}}, func(r *v1alpha2.PolicyReport) {
		r.Labels = map[string]string{"app.kubernetes.io/managed-by": "someone-else"}
	})
	relabelled := getReport(t, ns, "celaudit")

	expectReportNames(t, ns, "celaudit.1")
	expectReport(t, ns, 0, "warn bad: "+ownerMessage)
	expectNameTakenEvent(t, ns, "celaudit")
	// A later change is written to the new report only.
	update(t, configMap(ns, "bad", nil), func(c *corev1.ConfigMap) { c.Data["size"] = "2" })
	create(t, configMap(ns, "worse", map[string]string{"size": "3"}))
	expectReport(t, ns, 0, "warn bad: "+ownerMessage, "warn worse: "+ownerMessage)
	if got := counter.StatusIn("create", "policyreports", ns, http.StatusConflict); got != 1 {
		t.Errorf("%d creates of PolicyReports in %s refused as conflicting, want 1", got, ns)
	}
	assertUntouched(t, relabelled)
}

// A create refused because a report of celaudit's holds the name is the cache lagging behind celaudit's own
// writes: retried quietly while the cache may catch up, and returned as an error, which the controller's
// metrics count and its log shows, once that lasts longer than MaxHold.
func TestPersistentReportConflictIsAnError(t *testing.T) {
	ctx := context.Background()
	const ns = "conflict-lag"
	create(t, namespace(ns), &v1alpha2.PolicyReport{
		ObjectMeta: metav1.ObjectMeta{Name: "celaudit", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "celaudit"}},
	})
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	// A cache that never shows the report.
	blind := interceptor.NewClient(direct, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*v1alpha2.PolicyReportList); ok {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC))
	recorder := events.NewFakeRecorder(10)
	r := &controllers.ReportReconciler{
		Client:    blind,
		APIReader: env.Client,
		Events:    recorder,
		Results:   staticResults{{Policy: "p", Verdict: audit.Fail, Message: "m", Resource: audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "x", UID: "u"}}},
		Ready:     func() bool { return true },
		Clock:     clk,
		Coalesce:  time.Second,
		MaxHold:   10 * time.Second,
	}
	for _, step := range []struct {
		after   time.Duration // since the previous reconcile
		wantErr bool
	}{
		{0, false},
		{5 * time.Second, false},
		{4 * time.Second, false},
		{time.Second, true},
		{time.Second, true},
	} {
		clk.Step(step.after)
		res, err := r.ReconcileForTest(ctx, ns)
		if step.wantErr {
			if !apierrors.IsAlreadyExists(err) {
				t.Fatalf("at %s: Reconcile = %+v, %v; want the refusal as an error", clk.Now().Format(time.TimeOnly), res, err)
			}
			continue
		}
		if err != nil || res.RequeueAfter != time.Second {
			t.Fatalf("at %s: Reconcile = %+v, %v; want a retry after Coalesce", clk.Now().Format(time.TimeOnly), res, err)
		}
	}
	if n := len(recorder.Events); n != 0 {
		t.Errorf("%d Events about a report of celaudit's: %s", n, <-recorder.Events)
	}
}

// assertUntouched fails the test unless the report the API server holds is want, at the same resourceVersion.
func assertUntouched(t *testing.T, want *v1alpha2.PolicyReport) {
	t.Helper()
	got := getReport(t, want.Namespace, want.Name)
	if got.ResourceVersion != want.ResourceVersion || !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("PolicyReport %s/%s was written:\n got %+v\nwant %+v", want.Namespace, want.Name, got, want)
	}
}
