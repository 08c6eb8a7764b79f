package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// ownerPolicy creates a ValidatingAdmissionPolicy named name, with a [Warn] binding of the same name, that
// wants every ConfigMap in the namespaces labelled label=yes to name an owner, and deletes both when the test
// ends. Its results are warnings: "warn <configmap>: configmaps must name an owner".
func ownerPolicy(t *testing.T, name, label string) {
	t.Helper()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configMapRule()}},
			Validations:      []admissionregistrationv1.Validation{{Expression: "has(object.data) && 'owner' in object.data", Message: ownerMessage}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)},
		},
	}
	create(t, policy, binding)
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), binding)
		_ = env.Client.Delete(context.Background(), policy)
	})
}

const ownerMessage = "configmaps must name an owner"

// reconcileErrors returns controller-runtime's count of the errors the report controller returned. Every
// operator of the test process adds to it (their controllers share the name); the tests run one at a time.
func reconcileErrors(t *testing.T) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "policyreport" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// serialOptions are TestOptions whose report controller handles one namespace at a time, in the order their
// changes come, and writes a change at once: the reconcile of a namespace whose change came before another
// namespace's has finished by the time that other namespace's change is published.
func serialOptions() controllers.Options {
	o := envtestutil.TestOptions()
	o.ReportWorkers = 1
	o.ReportCoalesce = time.Millisecond
	return o
}

// reportWritesIn returns the writes of PolicyReports counter saw in namespace.
func reportWritesIn(c *envtestutil.RequestCounter, namespace string) int {
	n := 0
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		n += c.GetIn(verb, "policyreports", namespace)
	}
	return n
}

// holdsResult reports whether the operator's results for namespace hold verdict for the object named name.
func holdsResult(op *controllers.Operator, namespace, name string, verdict audit.Verdict) bool {
	results, _ := op.Results.NamespaceCounted(namespace)
	for _, r := range results {
		if r.Resource.Name == name && r.Verdict == verdict {
			return true
		}
	}
	return false
}

// A namespace being deleted keeps its audited objects while a finalizer holds one of them. Its reports are
// left to go with it: the API server refuses to create any there, and retrying that every second made a
// reconcile error each time.
func TestNoReportWritesIntoTerminatingNamespace(t *testing.T) {
	ctx := context.Background()
	const ns, other, label = "term-a", "term-b", "term-audit"
	held := configMap(ns, "held", map[string]string{"owner": "a"})
	held.Finalizers = []string{"celaudit.io/test-hold"}
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other, Labels: map[string]string{label: "yes"}}},
		held,
		configMap(ns, "plain", map[string]string{"size": "1"}),
		configMap(other, "sentinel", map[string]string{"owner": "b"}),
	)
	ownerPolicy(t, "term-owner", label)
	counter := &envtestutil.RequestCounter{}
	op, _ := envtestutil.StartOperator(t, counter.Wrap(env.Config), serialOptions())
	envtestutil.WaitSettled(t, op)
	expectReport(t, ns, 1, "warn plain: "+ownerMessage)
	expectReport(t, other, 1)

	// The namespace is deleted. No namespace controller runs here, so it stays Terminating with its objects, as
	// it does in a cluster while the finalizer holds one of them.
	if err := env.Client.Delete(ctx, namespace(ns)); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 10*time.Second, func() error {
		n := &corev1.Namespace{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil {
			return err
		}
		if n.Status.Phase != corev1.NamespaceTerminating {
			return fmt.Errorf("namespace %s is %s", ns, n.Status.Phase)
		}
		return nil
	})
	errorsBefore, writesBefore := reconcileErrors(t), reportWritesIn(counter, ns)

	// As the namespace controller does, its reports are deleted while the held object remains; and the
	// results change. The operator sees both.
	if err := env.Client.DeleteAllOf(ctx, &v1alpha2.PolicyReport{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	update(t, configMap(ns, "held", nil), func(c *corev1.ConfigMap) { c.Data = map[string]string{"size": "2"} })
	envtestutil.Eventually(t, 10*time.Second, func() error {
		cached := &v1alpha2.PolicyReportList{}
		if err := op.GetCache().List(ctx, cached, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(cached.Items) > 0 {
			return fmt.Errorf("the operator's cache still holds %d reports of %s", len(cached.Items), ns)
		}
		if !holdsResult(op, ns, "held", audit.Warn) {
			return fmt.Errorf("the operator has not evaluated the change of %s/held", ns)
		}
		return nil
	})
	// A later change elsewhere is published: the namespace's reconciles, queued before it, have run.
	update(t, configMap(other, "sentinel", nil), func(c *corev1.ConfigMap) { delete(c.Data, "owner") })
	expectReport(t, other, 0, "warn sentinel: "+ownerMessage)

	if w := reportWritesIn(counter, ns) - writesBefore; w != 0 {
		t.Errorf("%d report writes into the terminating namespace (%d refused as forbidden): %v",
			w, counter.StatusIn("create", "policyreports", ns, http.StatusForbidden), counter.Snapshot())
	}
	if e := reconcileErrors(t) - errorsBefore; e != 0 {
		t.Errorf("%v reconcile errors of the report controller after the namespace began terminating", e)
	}

	// The finalizer goes, and so does the namespace: its objects are deleted, then it is finalized, as the
	// namespace controller would.
	update(t, configMap(ns, "held", nil), func(c *corev1.ConfigMap) { c.Finalizers = nil })
	if err := env.Client.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 10*time.Second, func() error {
		if results, passes := op.Results.NamespaceCounted(ns); len(results)+len(passes) > 0 {
			return fmt.Errorf("the operator still holds results of %s", ns)
		}
		return nil
	})
	finalizeNamespace(t, ns)
}

// staticResults is a ResultSource holding fixed results.
type staticResults []audit.Result

func (s staticResults) NamespaceCounted(namespace string) ([]audit.Result, map[types.UID]int) {
	var out []audit.Result
	for _, r := range s {
		if r.Resource.Namespace == namespace {
			out = append(out, r)
		}
	}
	return out, nil
}

// A write refused because the namespace is being deleted, which the cache has yet to show, ends the reconcile
// without an error or a retry.
func TestReportWriteRefusedAsNamespaceTerminates(t *testing.T) {
	ctx := context.Background()
	const ns = "term-unseen"
	create(t, namespace(ns))
	if err := env.Client.Delete(ctx, namespace(ns)); err != nil {
		t.Fatal(err)
	}
	counter := &envtestutil.RequestCounter{}
	direct, err := client.NewWithWatch(counter.Wrap(env.Config), client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	// The namespace as a cache that has not seen its deletion shows it.
	stale := interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if n, ok := obj.(*corev1.Namespace); ok {
				n.DeletionTimestamp, n.Status.Phase = nil, corev1.NamespaceActive
			}
			return nil
		},
	})
	r := &controllers.ReportReconciler{
		Client:  stale,
		Results: staticResults{{Policy: "p", Verdict: audit.Fail, Message: "m", Resource: audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "x", UID: "u"}}},
		Ready:   func() bool { return true },
		Clock:   clock.RealClock{},
		MaxHold: 10 * time.Second,
	}
	res, err := r.ReconcileForTest(ctx, ns)
	if err != nil || res != (ctrl.Result{}) {
		t.Fatalf("Reconcile = %+v, %v; want neither an error nor a retry", res, err)
	}
	if n := counter.StatusIn("create", "policyreports", ns, http.StatusForbidden); n != 1 {
		t.Fatalf("%d creates refused as forbidden, want 1: %v", n, counter.Snapshot())
	}
	finalizeNamespace(t, ns)
}

// finalizeNamespace removes the namespace controller's finalizer from a terminating namespace, which then goes.
func finalizeNamespace(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Namespace{}
	if err := env.Client.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	n.Spec.Finalizers = nil
	if err := env.Client.SubResource("finalize").Update(ctx, n); err != nil {
		t.Fatalf("finalizing namespace %s: %v", name, err)
	}
}

// TestDeletedReportKeepsTimestamps deletes a report by hand: it is written again with the times its results
// last changed, not the time it is written again.
func TestDeletedReportKeepsTimestamps(t *testing.T) {
	ctx := context.Background()
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "stamps", Labels: map[string]string{"stamps-audit": "yes"}}},
		configMap("stamps", "a", nil),
		configMap("stamps", "b", nil),
	)
	op, _ := envtestutil.StartOperator(t, env.Config, envtestutil.TestOptions())
	const msg = "config maps need data"
	policy, binding := boundPolicy("stamps-data", "has(object.data)", msg, configMapRule(),
		[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("stamps-audit")})
	create(t, policy, binding)
	deleteAfter(t, binding, policy)
	envtestutil.WaitSettled(t, op)
	expectReportContains(t, "stamps", "warn a: "+msg, "warn b: "+msg)

	stamps := func() (map[string]metav1.Timestamp, error) {
		list := &v1alpha2.PolicyReportList{}
		if err := env.Client.List(ctx, list, client.InNamespace("stamps")); err != nil {
			return nil, err
		}
		out := map[string]metav1.Timestamp{}
		for _, r := range list.Items {
			for _, res := range r.Results {
				out[res.Resources[0].Name] = res.Timestamp
			}
		}
		return out, nil
	}
	before, err := stamps()
	if err != nil {
		t.Fatal(err)
	}
	// Timestamps have a resolution of a second: the reports are deleted once the clock the operator stamps
	// results with is past the second of every timestamp they hold, so that a report written again with the
	// time it is written could not hold the same ones.
	envtestutil.Eventually(t, 5*time.Second, func() error {
		for name, ts := range before {
			if now := time.Now().Unix(); now <= ts.Seconds {
				return fmt.Errorf("the clock (%d) is not past the timestamp of %s (%d)", now, name, ts.Seconds)
			}
		}
		return nil
	})
	if err := env.Client.DeleteAllOf(ctx, &v1alpha2.PolicyReport{}, client.InNamespace("stamps")); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 30*time.Second, func() error {
		after, err := stamps()
		if err != nil {
			return err
		}
		if len(after) != 2 {
			return fmt.Errorf("results after the deletion: %v", after)
		}
		for name, ts := range before {
			if after[name] != ts {
				return fmt.Errorf("timestamp of %s: %v before the deletion, %v after", name, ts, after[name])
			}
		}
		return nil
	})
}
