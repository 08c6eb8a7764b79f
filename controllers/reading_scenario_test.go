package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// coreRule matches CREATE and UPDATE of core v1 resources.
func coreRule(resources ...string) admissionregistrationv1.NamedRuleWithOperations {
	return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: resources},
	}}
}

// boundPolicy returns a policy with one validation and its binding.
func boundPolicy(name, expression, message string, rule admissionregistrationv1.NamedRuleWithOperations,
	actions []admissionregistrationv1.ValidationAction, match *admissionregistrationv1.MatchResources,
) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule}},
			Validations:      []admissionregistrationv1.Validation{{Expression: expression, Message: message}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: actions, MatchResources: match},
	}
	return policy, binding
}

// deleteAfter deletes objs when the test ends: cluster-scoped policies would otherwise audit later tests' objects.
func deleteAfter(t *testing.T, objs ...client.Object) {
	t.Cleanup(func() {
		for _, o := range objs {
			_ = client.IgnoreNotFound(env.Client.Delete(context.Background(), o))
		}
	})
}

// clusterResults returns "verdict name: message" for the results of the cluster reports on objects whose
// name starts with prefix, sorted: the cluster report is shared with every test's cluster-scoped objects.
func clusterResults(ctx context.Context, prefix string) ([]string, error) {
	all, _, err := reportResults(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range all {
		if _, rest, ok := strings.Cut(r, " "); ok && strings.HasPrefix(rest, prefix) {
			out = append(out, r)
		}
	}
	return out, nil
}

func expectClusterResults(t *testing.T, prefix string, want ...string) {
	t.Helper()
	expectStrings(t, "cluster results on "+prefix+"*", func(ctx context.Context) ([]string, error) { return clusterResults(ctx, prefix) }, want)
}

// expectStrings waits until get returns want, in any order.
func expectStrings(t *testing.T, what string, get func(context.Context) ([]string, error), want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	envtestutil.Eventually(t, 30*time.Second, func() error {
		got, err := get(context.Background())
		if err != nil {
			return err
		}
		got = slices.Sorted(slices.Values(got))
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s:\n got %q\nwant %q", what, got, want)
		}
		return nil
	})
}

// TestNamespaceRelabelScenario relabels namespaces that a policy on Namespaces and config maps selects with
// its binding's namespaceSelector: the objects in them and the Namespaces themselves are evaluated again,
// nothing lists Namespaces under a namespace, and the reports end as a fresh audit writes them.
func TestNamespaceRelabelScenario(t *testing.T) {
	ctx := context.Background()
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rl-a", Labels: map[string]string{"rl-audit": "yes"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rl-b"}},
		configMap("rl-a", "cm", nil),
		configMap("rl-b", "cm", nil),
	)
	counter := &envtestutil.RequestCounter{}
	op, stop := envtestutil.StartOperator(t, counter.Wrap(env.Config), envtestutil.TestOptions())
	const msg = "an owner label is required"
	policy, binding := boundPolicy("rl-owner", "has(object.metadata.labels) && 'owner' in object.metadata.labels", msg,
		coreRule("namespaces", "configmaps"), []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("rl-audit")})
	create(t, policy, binding)
	deleteAfter(t, binding, policy)
	envtestutil.WaitSettled(t, op)
	expectReport(t, "rl-a", 0, "warn cm: "+msg)
	expectClusterResults(t, "rl-", "warn rl-a: "+msg)

	// rl-a gets an owner: the Namespace passes. rl-b is selected: its config map and itself are warned about.
	update(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rl-a"}}, func(ns *corev1.Namespace) { ns.Labels["owner"] = "data" })
	update(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rl-b"}}, func(ns *corev1.Namespace) {
		ns.Labels = map[string]string{"rl-audit": "yes"}
	})
	// A namespace created selected, after the first audit.
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rl-c", Labels: map[string]string{"rl-audit": "yes"}}})
	expectReport(t, "rl-a", 0, "warn cm: "+msg)
	expectReport(t, "rl-b", 0, "warn cm: "+msg)
	expectClusterResults(t, "rl-", "warn rl-b: "+msg, "warn rl-c: "+msg)
	for _, ns := range []string{"rl-a", "rl-b", "rl-c"} {
		if n := counter.GetIn("list", "namespaces", ns); n != 0 {
			t.Errorf("%d LISTs of namespaces under namespace %s", n, ns)
		}
	}
	all, _, err := reportResults(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if strings.HasPrefix(r, "error : cannot read") {
			t.Errorf("read error in the cluster report: %s", r)
		}
	}

	// A fresh audit publishes the same.
	stop()
	want := map[string][]string{}
	for _, ns := range []string{"rl-a", "rl-b"} {
		got, _, err := reportResults(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		want[ns] = got
		if err := env.Client.DeleteAllOf(ctx, &v1alpha2.PolicyReport{}, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	clusterWant, err := clusterResults(ctx, "rl-")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.DeleteAllOf(ctx, &v1alpha2.ClusterPolicyReport{}, client.MatchingLabels{"app.kubernetes.io/managed-by": "celaudit"}); err != nil {
		t.Fatal(err)
	}
	fresh, _ := envtestutil.StartOperator(t, env.Config, envtestutil.TestOptions())
	envtestutil.WaitSettled(t, fresh)
	expectReport(t, "rl-a", 0, want["rl-a"]...)
	expectReport(t, "rl-b", 0, want["rl-b"]...)
	expectClusterResults(t, "rl-", clusterWant...)
}

// TestWildcardPolicyReadsOnlyAuditableResources audits with a policy matching every resource: resources that
// cannot be watched (componentstatuses) are never read, and celaudit's own reports are not audited, so
// writing them causes no further round of writes.
func TestWildcardPolicyReadsOnlyAuditableResources(t *testing.T) {
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "wild", Labels: map[string]string{"wild-audit": "yes"}}},
		configMap("wild", "wild-bad", nil),
	)
	counter := &envtestutil.RequestCounter{}
	op, _ := envtestutil.StartOperator(t, counter.Wrap(env.Config), envtestutil.TestOptions())
	const msg = "wild-bad is not a good name"
	policy, binding := boundPolicy("wild-all", "!object.metadata.name.startsWith('wild-bad')", msg,
		admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}},
		}},
		[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("wild-audit")})
	create(t, policy, binding)
	deleteAfter(t, binding, policy)
	envtestutil.WaitSettled(t, op)
	expectReportContains(t, "wild", "warn wild-bad: "+msg)

	// A later change is published: everything the first write caused has been seen by then.
	create(t, configMap("wild", "wild-bad-2", nil))
	expectReportContains(t, "wild", "warn wild-bad: "+msg, "warn wild-bad-2: "+msg)

	for _, verb := range []string{"list", "watch"} {
		if n := counter.Get(verb, "componentstatuses"); n != 0 {
			t.Errorf("%d %s requests of componentstatuses, which cannot be watched", n, verb)
		}
	}
	reports := &v1alpha2.PolicyReportList{}
	if err := env.Client.List(context.Background(), reports, client.InNamespace("wild")); err != nil {
		t.Fatal(err)
	}
	results, passes := op.Results.NamespaceCounted("wild")
	for _, r := range reports.Items {
		if passes[r.UID] > 0 || slices.ContainsFunc(results, func(res audit.Result) bool { return res.Resource.UID == r.UID }) {
			t.Errorf("celaudit audited its own report %s/%s", r.Namespace, r.Name)
		}
	}
	if len(reports.Items) == 0 {
		t.Fatal("no reports in namespace wild")
	}
	if n := counter.GetIn("create", "policyreports", "wild") + counter.GetIn("update", "policyreports", "wild"); n != 2 {
		t.Errorf("%d writes of the reports of namespace wild, want 2 (the first audit, then wild-bad-2)", n)
	}
}

// expectReportContains waits until the listed results of namespace ns are exactly want, whatever the passes.
func expectReportContains(t *testing.T, ns string, want ...string) {
	t.Helper()
	expectStrings(t, "report of "+ns, func(ctx context.Context) ([]string, error) {
		got, _, err := reportResults(ctx, ns)
		return got, err
	}, want)
}

// TestUnreadableResourceScenario audits a resource whose LISTs fail: retries back off exponentially, the
// error result follows the current cause, and the policy gets a Warning Event.
func TestUnreadableResourceScenario(t *testing.T) {
	ctx := context.Background()
	failures := &envtestutil.ListFailures{Resource: "limitranges"}
	failures.SetMessage("limit ranges are unavailable (first cause)")
	cfg := failures.Wrap(env.Config)
	opts := envtestutil.TestOptions()
	opts.ReadBackoff = 100 * time.Millisecond
	_, _ = envtestutil.StartOperator(t, cfg, opts)
	policy, binding := boundPolicy("unread-limits", "true", "never", coreRule("limitranges"),
		[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, nil)
	create(t, policy, binding)
	deleteAfter(t, binding, policy)

	const prefix = "error : cannot read v1/limitranges: "
	expectErrorResult := func(cause string) {
		t.Helper()
		envtestutil.Eventually(t, 30*time.Second, func() error {
			all, _, err := reportResults(ctx, "")
			if err != nil {
				return err
			}
			if !slices.Contains(all, prefix+cause) {
				return fmt.Errorf("no result %q in the cluster reports: %q", prefix+cause, all)
			}
			return nil
		})
	}
	expectErrorResult("limit ranges are unavailable (first cause)")
	// The first read and five retries, after waits of 100 ms, 200 ms, 400 ms, 800 ms and 1.6 s: with a fixed
	// wait of 100 ms there would be about 30 reads in that time.
	const reads = 6
	envtestutil.Eventually(t, 30*time.Second, func() error {
		if n := len(failures.Times()); n < reads {
			return fmt.Errorf("%d failed LISTs of limitranges, waiting for %d", n, reads)
		}
		return nil
	})
	times := failures.Times()[:reads]
	gaps := make([]time.Duration, reads-1)
	for i := range gaps {
		gaps[i] = times[i+1].Sub(times[i])
	}
	// No retry comes before its wait is over: retry k waits 100 ms × 2^(k-1), and the time between two LISTs
	// is that wait and the time the operator takes to handle a failure.
	for i, gap := range gaps {
		if wait := opts.ReadBackoff << i; gap < wait {
			t.Errorf("retry %d came %s after the read before it, want at least %s (gaps %v)", i+1, gap.Round(time.Millisecond), wait, gaps)
		}
	}
	// The waits grow, however long handling a failure takes: the last gap exceeds the first by 1.5 s of
	// waiting, of which the check asks for half. With a fixed wait the gaps would stay alike, also when a slow
	// operator makes each of them longer than the backoff.
	first, last := gaps[0], gaps[len(gaps)-1]
	if grown, want := last-first, (opts.ReadBackoff<<(len(gaps)-1)-opts.ReadBackoff)/2; grown < want {
		t.Errorf("the waits between retries do not double: the last gap is %s longer than the first, want at least %s (gaps %v)",
			grown.Round(time.Millisecond), want, gaps)
	}

	failures.SetMessage("limit ranges are unavailable (second cause)")
	// The current cause shows once the next retry (about 6.4 s after the first failure) has run.
	expectErrorResult("limit ranges are unavailable (second cause)")

	envtestutil.Eventually(t, 10*time.Second, func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(ctx, list, client.InNamespace("default")); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == policy.Name && e.Regarding.Kind == "ValidatingAdmissionPolicy" &&
				e.Reason == controllers.ReasonResourceUnreadable && e.Type == corev1.EventTypeWarning &&
				strings.Contains(e.Note, "first cause") {
				return nil
			}
		}
		return fmt.Errorf("no %s Warning Event on policy %s", controllers.ReasonResourceUnreadable, policy.Name)
	})
}
