package controllers_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// sentThrough returns a copy of cfg that calls before with each request just before it is sent.
func sentThrough(cfg *rest.Config, before func(*http.Request)) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			before(req)
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

// resultsAbout returns the lines of envtestutil.ReportResults (in namespaces, and the cluster reports) that
// contain s.
func resultsAbout(ctx context.Context, s string, namespaces ...string) ([]string, error) {
	lines, err := envtestutil.ReportResults(ctx, env.Client, namespaces...)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range lines {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out, nil
}

// TestCRDDeletedMidListScenario deletes a CRD while celaudit lists its objects: the first page of the LIST is
// served, and the CRD is gone (its objects with it) before the second is asked for. Both a policy of the
// CRD's own rules and a ValidatingAdmissionPolicy cover the CRD's resource. celaudit does not crash, no
// result about the deleted CRD's objects (nor a read error of its resource) remains, the ConfigMaps the
// policy also covers are audited, and the reports equal a fresh audit of the final state.
func TestCRDDeletedMidListScenario(t *testing.T) {
	ctx := context.Background()
	const ns, label = "f2-crd", "f2-crd"
	rule := apiextensionsv1.ValidationRule{Rule: "self.replicas <= 5", Message: "replicas must be at most 5"}
	// The objects are stored before the rule is added, which they violate.
	crd := widgetCRD("midlists", "Midlist", apiextensionsv1.NamespaceScoped)
	mustApply(t, crd, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}})
	if err := envtestutil.WaitEstablished(ctx, env.Client, crd.Name); err != nil {
		t.Fatal(err)
	}
	deleteAfter(t, crd)
	for i := range 12 {
		mustApply(t, widget("Midlist", ns, fmt.Sprintf("w-%02d", i), int64(i)))
	}
	crd = widgetCRD("midlists", "Midlist", apiextensionsv1.NamespaceScoped, rule)
	mustApply(t, crd)
	create(t, configMap(ns, "bad-cm", nil), configMap(ns, "ok-cm", nil))
	policy, binding := boundPolicy("f2-crd-names", "!object.metadata.name.startsWith('bad') && (!has(object.spec) || object.spec.replicas % 2 == 0)",
		"no bad names, even replicas",
		admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{"", scenarioGroup}, APIVersions: []string{"v1"},
				Resources: []string{"configmaps", "midlists"}},
		}},
		[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)})
	create(t, policy, binding)
	deleteAfter(t, binding, policy)

	// The CRD is deleted, and gone, between the first page of a LIST of its objects and the second.
	var (
		deleted   atomic.Bool
		deleteErr error
		once      sync.Once
	)
	id := env.ShippedIdentity(t)
	cfg := sentThrough(id.Config, func(req *http.Request) {
		if !strings.HasSuffix(req.URL.Path, "/midlists") || req.URL.Query().Get("continue") == "" {
			return
		}
		once.Do(func() {
			deleteErr = deleteAndWaitGone(ctx, crd)
			deleted.Store(true)
		})
	})
	opts := envtestutil.TestOptions()
	opts.PageSize = 3
	opts.ReadBackoff = 100 * time.Millisecond
	op, stop := envtestutil.StartOperator(t, cfg, opts)
	envtestutil.Eventually(t, 2*time.Minute, func() error {
		if !deleted.Load() {
			return fmt.Errorf("no second page of midlists asked for yet")
		}
		return nil
	})
	if deleteErr != nil {
		t.Fatalf("deleting the CRD between two pages: %v", deleteErr)
	}
	envtestutil.WaitSettled(t, op)
	expectReport(t, ns, 1, "warn bad-cm: no bad names, even replicas")
	envtestutil.Eventually(t, time.Minute, func() error {
		stale, err := resultsAbout(ctx, "midlists", ns)
		if err != nil {
			return err
		}
		more, err := resultsAbout(ctx, "Midlist", ns)
		if err != nil {
			return err
		}
		if stale = append(stale, more...); len(stale) > 0 {
			return fmt.Errorf("results about the deleted CRD remain:\n%s", strings.Join(stale, "\n"))
		}
		return nil
	})
	stop()
	envtestutil.AssertFreshAuditAgrees(t, env.Client, id.Config, opts, ns)
}

// deleteAndWaitGone deletes obj and waits until the API server no longer has it.
func deleteAndWaitGone(ctx context.Context, obj client.Object) error {
	if err := env.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// TestParamDeletedScenario binds one policy twice to the same param ConfigMap, with parameterNotFoundAction
// Deny and Allow, then deletes the param. Before, both bindings judge the ConfigMaps by the param; after, the
// Deny binding gives each an error result whose message is the API server's own answer to a request the
// binding judges without its param, and the Allow binding gives none (the API server admits without
// evaluating). The reports then equal a fresh audit.
func TestParamDeletedScenario(t *testing.T) {
	ctx := context.Background()
	const ns, label = "f2-param", "f2-param"
	param := configMap(ns, "f2-limits", map[string]string{"max": "5"})
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}},
		param, configMap(ns, "small", map[string]string{"size": "3"}), configMap(ns, "big", map[string]string{"size": "9"}))
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "f2-param"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configMapRule()}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.data) || !('size' in object.data) || int(object.data.size) <= int(params.data.max)",
				Message:    "size over the limit",
			}},
		},
	}
	bind := func(name string, action admissionregistrationv1.ParameterNotFoundActionType) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: policy.Name,
				ParamRef: &admissionregistrationv1.ParamRef{Name: param.Name, Namespace: ns,
					ParameterNotFoundAction: ptr.To(action)},
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
				MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)},
			},
		}
	}
	deny, allow := bind("f2-param-deny", admissionregistrationv1.DenyAction), bind("f2-param-allow", admissionregistrationv1.AllowAction)
	create(t, policy, deny, allow)
	deleteAfter(t, deny, allow, policy)

	id := env.ShippedIdentity(t)
	opts := envtestutil.TestOptions()
	op, stop := envtestutil.StartOperator(t, id.Config, opts)
	envtestutil.WaitSettled(t, op)
	expectReport(t, ns, 4, "fail big: size over the limit", "fail big: size over the limit")

	if err := env.Client.Delete(ctx, param); err != nil {
		t.Fatal(err)
	}
	// What the API server answers once the param is gone, for a ConfigMap within the limit and one over it.
	var answers []string
	envtestutil.Eventually(t, 30*time.Second, func() error {
		answers = nil
		for _, data := range []map[string]string{{"size": "1"}, {"size": "9"}} {
			err := env.Client.Create(ctx, configMap(ns, "probe", data), client.DryRunAll)
			if err == nil || !strings.Contains(err.Error(), "no params found") {
				return fmt.Errorf("the API server's answer without the param: %w", err)
			}
			answers = append(answers, err.Error())
		}
		return nil
	})
	const missing = "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
	for _, a := range answers {
		if !strings.Contains(a, "binding 'f2-param-deny' denied request: "+missing) || strings.Contains(a, "f2-param-allow") {
			t.Errorf("the API server answers %q, want the Deny binding's missing param alone", a)
		}
	}
	expectReport(t, ns, 0, "error big: "+missing, "error small: "+missing)
	stop()
	envtestutil.AssertFreshAuditAgrees(t, env.Client, id.Config, opts, ns)
}

// TestNamespaceDeletedScenario deletes a namespace whose objects had results. envtest runs no namespace
// controller, so the test does its work, in the order that tempts a writer most: the namespace is marked
// for deletion, its reports are deleted while its objects are still there (and one of them changes), then the
// objects, then the namespace is finalized. celaudit never recreates a report in the terminating namespace
// (no hot loop of refused creates), the namespace's reports go with it, and the cluster-wide view equals a
// fresh audit.
func TestNamespaceDeletedScenario(t *testing.T) {
	ctx := context.Background()
	const gone, stay, label, msg = "f2-gone", "f2-stay", "f2-ns", "an owner label is required"
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gone, Labels: map[string]string{label: "yes"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: stay, Labels: map[string]string{label: "yes", "owner": "ops"}}},
		configMap(gone, "a", nil), configMap(gone, "b", nil), configMap(stay, "c", nil))
	policy, binding := boundPolicy("f2-ns-owner", "has(object.metadata.labels) && 'owner' in object.metadata.labels", msg,
		coreRule("namespaces", "configmaps"), []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)})
	create(t, policy, binding)
	deleteAfter(t, binding, policy)

	id := env.ShippedIdentity(t)
	counter := &envtestutil.RequestCounter{}
	logs := &logBuffer{}
	opts := envtestutil.TestOptions()
	opts.Logger = logs.logger()
	op, stop := envtestutil.StartOperator(t, counter.Wrap(id.Config), opts)
	envtestutil.WaitSettled(t, op)
	expectReport(t, gone, 0, "warn a: "+msg, "warn b: "+msg)
	expectReport(t, stay, 0, "warn c: "+msg)
	expectClusterResults(t, "f2-", "warn f2-gone: "+msg)

	created := counter.GetIn("create", "policyreports", gone) // before the deletion
	if err := env.Client.Delete(ctx, namespace(gone)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.DeleteAllOf(ctx, &v1alpha2.PolicyReport{}, client.InNamespace(gone)); err != nil {
		t.Fatal(err)
	}
	// A change of the namespace's results calls for a write there. The reconciler either leaves the
	// namespace to its deletion (and logs it), or tries a create the API server refuses; a writer that
	// retried would try more.
	left := func() int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "its reports are left to go with it") && strings.Contains(l, `"namespace"="`+gone+`"`) {
				n++
			}
		}
		return n
	}
	leftBefore := left()
	update(t, configMap(gone, "a", nil), func(cm *corev1.ConfigMap) { cm.Labels = map[string]string{"owner": "late"} })
	envtestutil.Eventually(t, 30*time.Second, func() error {
		if left() > leftBefore || counter.StatusIn("create", "policyreports", gone, http.StatusForbidden) > 1 {
			return nil
		}
		return fmt.Errorf("the change in the terminating namespace is not handled yet")
	})
	// A change in another namespace, written after the one above: by then a writer that retries the
	// terminating namespace would have done so many times.
	create(t, configMap(stay, "d", nil))
	expectReport(t, stay, 0, "warn c: "+msg, "warn d: "+msg)
	// One create may go out before the operator's cache shows the deletion; its refusal ends the attempts.
	if n := counter.GetIn("create", "policyreports", gone) - created; n > 1 {
		t.Errorf("%d creates of reports in the terminating namespace (%d refused), want at most 1",
			n, counter.StatusIn("create", "policyreports", gone, http.StatusForbidden))
	}
	list := &v1alpha2.PolicyReportList{}
	if err := env.Client.List(ctx, list, client.InNamespace(gone)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d reports recreated in the terminating namespace", len(list.Items))
	}

	// The namespace controller's last steps: the objects go, then the namespace.
	for _, name := range []string{"a", "b"} {
		if err := env.Client.Delete(ctx, configMap(gone, name, nil)); err != nil {
			t.Fatal(err)
		}
	}
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	terminating := &corev1.Namespace{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: gone}, terminating); err != nil {
		t.Fatal(err)
	}
	terminating.Spec.Finalizers = nil
	if _, err := clientset.CoreV1().Namespaces().Finalize(ctx, terminating, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 30*time.Second, func() error {
		err := env.Client.Get(ctx, client.ObjectKey{Name: gone}, &corev1.Namespace{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %s not gone: %w", gone, err)
		}
		return nil
	})
	expectClusterResults(t, "f2-")
	expectReport(t, gone, 0)
	if n := counter.GetIn("create", "policyreports", gone) - created; n > 1 {
		t.Errorf("%d creates of reports in the namespace since its deletion, want at most 1", n)
	}
	stop()
	envtestutil.AssertFreshAuditAgrees(t, env.Client, id.Config, opts, gone, stay)
}

// blobCRD returns a CRD of namespaced Blobs whose spec has a string blob, with rules on spec.
func blobCRD(rules ...apiextensionsv1.ValidationRule) *apiextensionsv1.CustomResourceDefinition {
	crd := widgetCRD("blobs", "Blob", apiextensionsv1.NamespaceScoped, rules...)
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.Properties["blob"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	return crd
}

// TestHugeObjectScenario audits a custom resource of about 1.4 MiB, near etcd's limit, with a rule of its
// CRD (on its replicas) and a ValidatingAdmissionPolicy whose messageExpression quotes the whole blob. The verdicts are the
// API server's, the messages are bounded (the report's cap, not the object's size), every report stays far
// below etcd's limit, and the reports equal a fresh audit.
func TestHugeObjectScenario(t *testing.T) {
	ctx := context.Background()
	const ns, label, size = "f2-huge", "f2-huge", 1400 * 1024
	mustApply(t, blobCRD(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}})
	if err := envtestutil.WaitEstablished(ctx, env.Client, "blobs."+scenarioGroup); err != nil {
		t.Fatal(err)
	}
	deleteAfter(t, blobCRD())
	huge := widget("Blob", ns, "huge", 7)
	if err := unstructured.SetNestedField(huge.Object, strings.Repeat("x", size), "spec", "blob"); err != nil {
		t.Fatal(err)
	}
	small := widget("Blob", ns, "small", 1)
	if err := unstructured.SetNestedField(small.Object, "tiny", "spec", "blob"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, huge, small)
	// The rules come after the objects, which they would keep out.
	const tooBig = "replicas must be at most 5"
	mustApply(t, blobCRD(apiextensionsv1.ValidationRule{Rule: "self.replicas <= 5", Message: tooBig}))
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "f2-huge"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{scenarioGroup}, APIVersions: []string{"v1"}, Resources: []string{"blobs"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression:        "object.spec.blob.size() <= 1000",
				Message:           "the blob is too big",
				MessageExpression: "'the blob is ' + object.spec.blob",
			}, {
				Expression:        "object.spec.blob.size() <= 2000",
				MessageExpression: "'the blob starts with ' + object.spec.blob.substring(0, 5000)",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "f2-huge"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)},
		},
	}
	create(t, policy, binding)
	deleteAfter(t, binding, policy)

	id := env.ShippedIdentity(t)
	opts := envtestutil.TestOptions()
	op, stop := envtestutil.StartOperator(t, id.Config, opts)
	envtestutil.WaitSettled(t, op)

	// The API server's answers to the huge object: the CRD's rule, and the policy's.
	var crdAnswer, vapAnswer string
	envtestutil.Eventually(t, 30*time.Second, func() error {
		crdAnswer = apiserverRejectionOf(ctx, huge)
		cp := huge.DeepCopy()
		if err := unstructured.SetNestedField(cp.Object, int64(1), "spec", "replicas"); err != nil {
			return err
		}
		vapAnswer = apiserverRejectionOf(ctx, cp)
		if !strings.Contains(crdAnswer, tooBig) || !strings.Contains(vapAnswer, "ValidatingAdmissionPolicy 'f2-huge'") {
			return fmt.Errorf("the API server does not deny the huge object yet: %q", crdAnswer)
		}
		return nil
	})
	var got []v1alpha2.PolicyReportResult
	envtestutil.Eventually(t, 30*time.Second, func() error {
		var err error
		if got, _, err = celauditResults(ctx, ns); err != nil {
			return err
		}
		if len(got) != 3 {
			return fmt.Errorf("%d results in %s, want 3: %v", len(got), ns, got)
		}
		return nil
	})
	for _, r := range got {
		if r.Resources[0].Name != "huge" || r.Result != v1alpha2.StatusFail {
			t.Errorf("result %s on %s, want a fail on huge", r.Result, r.Resources[0].Name)
		}
		if len(r.Message) > 4096 {
			t.Errorf("a message of %d bytes", len(r.Message))
		}
		answer := crdAnswer
		switch {
		case strings.HasPrefix(r.Message, "the blob starts with "):
			// The second validation's message: the API server stops at the first, and would show it whole.
			want := "the blob starts with " + strings.Repeat("x", 4096-len("the blob starts with ")-len(report.TruncationMarker)) +
				report.TruncationMarker
			if r.Message != want {
				t.Errorf("message of %d bytes %.100q..., want it cut to 4096 bytes with the truncation marker", len(r.Message), r.Message)
			}
			continue
		case r.Policy == policy.Name:
			answer = vapAnswer
		}
		if !strings.Contains(answer, r.Message) {
			t.Errorf("result of %s %.300q is not in the API server's answer %.600q", r.Policy, r.Message, answer)
		}
	}
	list := &v1alpha2.PolicyReportList{}
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Items {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 64*1024 {
			t.Errorf("report %s is %d bytes: the huge object's content reached it", r.Name, len(data))
		}
	}
	stop()
	envtestutil.AssertFreshAuditAgrees(t, env.Client, id.Config, opts, ns)
}

// apiserverRejectionOf returns the API server's answer to a server-side dry-run create of a copy of obj, ""
// when it admits it.
func apiserverRejectionOf(ctx context.Context, obj *unstructured.Unstructured) string {
	cp := obj.DeepCopy()
	cp.SetName(obj.GetName() + "-dryrun")
	cp.SetResourceVersion("")
	cp.SetUID("")
	if err := env.Client.Create(ctx, cp, client.DryRunAll); err != nil {
		return err.Error()
	}
	return ""
}

// manyNamespaces is how many namespaces TestTenThousandNamespacesScenario creates, one ConfigMap in each.
const manyNamespaces = 10_000

// createConcurrently runs create(i) for i in [0, n) on workers goroutines and returns the first error.
func createConcurrently(n, workers int, create func(i int) error) error {
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := create(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var first error
feed:
	for i := range n {
		select {
		case next <- i:
		case first = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		first = cmp.Or(first, err)
	}
	return first
}

// TestTenThousandNamespacesScenario audits 10,000 namespaces of one ConfigMap each, every tenth of which
// violates a policy, on a control plane of its own (namespaces cannot be deleted in envtest: the shared one
// would keep them). The first audit completes; each namespace has one report, which lists the warning of a
// violating one and counts the pass of the others; the time and memory it took are logged; and the reports
// equal a fresh audit.
func TestTenThousandNamespacesScenario(t *testing.T) {
	ctx := context.Background()
	own := envtestutil.StartForTest(t)
	fast := rest.CopyConfig(own.Config)
	fast.QPS = -1 // no client-side rate limit: the API server is the bottleneck
	c, err := client.New(fast, client.Options{Scheme: own.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	const label, msg = "f2-many", "no config map may be bad"
	name := func(i int) string { return fmt.Sprintf("many-%05d", i) }
	violates := func(i int) bool { return i%10 == 0 }
	start := time.Now()
	if err := createConcurrently(manyNamespaces, 64, func(i int) error {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name(i), Labels: map[string]string{label: "yes"}}}); err != nil {
			return err
		}
		return c.Create(ctx, configMap(name(i), "cm", map[string]string{"bad": fmt.Sprint(violates(i))}))
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d namespaces and ConfigMaps in %s", manyNamespaces, time.Since(start).Round(time.Millisecond))
	policy, binding := boundPolicy("f2-many", "object.data.bad != 'true'", msg, configMapRule(),
		[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)})
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	id := own.ShippedIdentity(t)
	opts := envtestutil.TestOptions()
	// As an install of this size would be tuned: the first audit writes ten thousand reports (one per
	// namespace: the others count its pass) at once.
	opts.QPS, opts.Burst, opts.ReportWorkers = 1000, 2000, 32
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start = time.Now()
	op, stop := envtestutil.StartOperator(t, id.Config, opts)
	envtestutil.Eventually(t, 3*time.Minute, func() error {
		if !op.Settled() {
			return fmt.Errorf("first audit not done")
		}
		return nil
	})
	settled := time.Since(start)
	var reports v1alpha2.PolicyReportList
	envtestutil.Eventually(t, 3*time.Minute, func() error {
		if err := c.List(ctx, &reports); err != nil {
			return err
		}
		if len(reports.Items) != manyNamespaces {
			return fmt.Errorf("%d reports, want one in each of the %d namespaces", len(reports.Items), manyNamespaces)
		}
		return nil
	})
	written := time.Since(start)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("first audit of %d namespaces: settled in %s, reports written in %s; heap in use %d MiB (%d MiB before the "+
		"operator started, this process's test clients included), %d MiB obtained from the OS, %d GC cycles",
		manyNamespaces, settled.Round(time.Millisecond), written.Round(time.Millisecond), after.HeapInuse>>20, before.HeapInuse>>20,
		after.Sys>>20, after.NumGC-before.NumGC)

	perNamespace := map[string][]string{}
	for _, r := range reports.Items {
		s := r.Summary
		line := fmt.Sprintf("pass %d, fail %d, warn %d, error %d, skip %d:", s.Pass, s.Fail, s.Warn, s.Error, s.Skip)
		for _, res := range r.Results {
			line += fmt.Sprintf(" %s %s: %s", res.Result, res.Resources[0].Name, res.Message)
		}
		perNamespace[r.Namespace] = append(perNamespace[r.Namespace], line)
	}
	for i := range manyNamespaces {
		want := "pass 1, fail 0, warn 0, error 0, skip 0:"
		if violates(i) {
			want = "pass 0, fail 0, warn 1, error 0, skip 0: warn cm: " + msg
		}
		if got := perNamespace[name(i)]; len(got) != 1 || got[0] != want {
			t.Errorf("namespace %s has reports %q, want one: %q", name(i), got, want)
		}
	}
	stop()
	start = time.Now()
	envtestutil.AssertFreshAuditAgrees(t, own.Client, id.Config, opts)
	t.Logf("the fresh audit, its reports deleted, written and compared, took %s", time.Since(start).Round(time.Millisecond))
}
