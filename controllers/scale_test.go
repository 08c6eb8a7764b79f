package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/test/envtestutil"
)

func vapFor(name, group, version, resource, expression, message string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: expression, Message: message}},
		},
	}
}

func bindingFor(name, policy, label string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)},
		},
	}
}

func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
			},
		},
	}
}

// A policy edit must re-read only the kinds that policy matches, with LISTs, and never GET objects one by one;
// a rescan annotation re-reads them too but writes nothing when nothing changed, though the policy has a
// listed result that a changed evaluation would rewrite.
func TestPolicyEditRereadsOnlyMatchingKinds(t *testing.T) {
	big := deployment("edit", "big")
	big.Spec.Replicas = ptr.To[int32](5)
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "edit", Labels: map[string]string{"edit-audit": "yes"}}},
		configMap("edit", "one", map[string]string{"tier": "gold"}),
		configMap("edit", "two", map[string]string{"tier": "silver"}),
		deployment("edit", "web"),
		big,
		vapFor("edit-cm", "", "v1", "configmaps", "object.data.tier == 'gold'", "tier must be gold"),
		bindingFor("edit-cm", "edit-cm", "edit-audit"),
		vapFor("edit-deploy", "apps", "v1", "deployments", "object.spec.replicas <= 3", "too many replicas"),
		bindingFor("edit-deploy", "edit-deploy", "edit-audit"),
		vapFor("edit-deploy-2", "apps", "v1", "deployments", "object.spec.replicas >= 1", "too few replicas"),
		bindingFor("edit-deploy-2", "edit-deploy-2", "edit-audit"),
	)
	counter := &envtestutil.RequestCounter{}
	op, _ := envtestutil.StartOperator(t, counter.Wrap(env.Config), envtestutil.TestOptions())
	envtestutil.WaitSettled(t, op)
	expectReport(t, "edit", 4, "warn two: tier must be gold", "warn big: too many replicas")
	// Two policies cover Deployments at start-up: the first audit reads them once, for both.
	if n := counter.Get("list", "deployments"); n != 1 {
		t.Fatalf("the first audit listed deployments %d times, want once", n)
	}

	counter.Reset()
	update(t, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "edit-cm"}}, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.Validations[0].Expression = "object.data.tier == 'silver'"
		p.Spec.Validations[0].Message = "tier must be silver"
	})
	expectReport(t, "edit", 4, "warn one: tier must be silver", "warn big: too many replicas")
	if got := counter.Get("list", "configmaps"); got == 0 {
		t.Fatalf("the edited policy's kind was not listed again: %v", counter.Snapshot())
	}
	for _, k := range []string{"list deployments", "get configmaps", "get deployments"} {
		if n := counter.Snapshot()[k]; n != 0 {
			t.Fatalf("editing a ConfigMap policy made %d %q requests: %v", n, k, counter.Snapshot())
		}
	}

	// On-demand rescan: the kind is read again; nothing changed, so no report is written.
	counter.Reset()
	before := mustPublishedIn(t, "edit")
	update(t, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "edit-deploy"}}, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Annotations = map[string]string{"celaudit.io/rescan": "now"}
	})
	envtestutil.Eventually(t, 10*time.Second, func() error {
		if counter.Get("list", "deployments") == 0 {
			return fmt.Errorf("rescan annotation did not re-read deployments: %v", counter.Snapshot())
		}
		return nil
	})
	// Settled once the rescan's LIST is evaluated, and any other LIST it asked for.
	envtestutil.WaitSettled(t, op)
	if n := counter.Get("list", "configmaps"); n != 0 {
		t.Fatalf("rescan of the Deployment policy listed configmaps %d times: %v", n, counter.Snapshot())
	}
	create(t, configMap("edit", "three", map[string]string{"tier": "gold"}))
	expectOnlyMarkerWritten(t, counter, "edit", before, "warn three: tier must be silver")
	if w := counter.Writes("policyreports"); w != 1 {
		t.Fatalf("rescan of an unchanged policy: %d report writes, want 1 (the marker's): %v", w, counter.Snapshot())
	}
}

// Ten thousand violations in one namespace produce chunked reports the API server accepts, each below the
// object size limit, whose summaries add up to the exact totals.
func TestTenThousandViolationsInOneNamespace(t *testing.T) {
	const n = 10000
	ctx := context.Background()
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "crowd", Labels: map[string]string{"crowd-audit": "yes"}}},
		vapFor("crowd", "", "v1", "configmaps", "has(object.data) && 'owner' in object.data", "configmaps must name an owner"),
		bindingFor("crowd", "crowd", "crowd-audit"),
	)
	var (
		wg   sync.WaitGroup
		errs = make(chan error, n)
		next = make(chan int)
	)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				// A few compliant objects, so that passes are counted beside the listed failures.
				data := map[string]string{"size": "1"}
				if i%1000 == 0 {
					data["owner"] = "me"
				}
				if err := env.Client.Create(ctx, configMap("crowd", fmt.Sprintf("cm-%05d", i), data)); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const passes = n / 1000
	var requests envtestutil.RequestCounter
	op, _ := envtestutil.StartOperator(t, requests.Wrap(env.Config), envtestutil.TestOptions())
	envtestutil.WaitSettled(t, op)

	var reports []v1alpha2.PolicyReport
	envtestutil.Eventually(t, 2*time.Minute, func() error {
		list := &v1alpha2.PolicyReportList{}
		if err := env.Client.List(ctx, list, client.InNamespace("crowd")); err != nil {
			return err
		}
		var sum v1alpha2.PolicyReportSummary
		listed := 0
		for _, r := range list.Items {
			sum = addSummary(sum, r.Summary)
			listed += len(r.Results)
		}
		if sum.Warn != n-passes || sum.Pass != passes || listed != n-passes {
			return fmt.Errorf("%d reports: summary %+v, %d results listed", len(list.Items), sum, listed)
		}
		reports = list.Items
		return nil
	})
	if len(reports) < 2 {
		t.Fatalf("10,000 results fit in %d report; expected chunks", len(reports))
	}
	// Each chunk is created once: a reconcile that runs before the cache shows the creates waits for them
	// instead of creating them again (409 AlreadyExists). Requests the client retried, after a 429 or a
	// timeout, are not duplicates of this kind and may add to the total.
	created := requests.StatusIn("create", "policyreports", "crowd", http.StatusCreated)
	conflicts := requests.StatusIn("create", "policyreports", "crowd", http.StatusConflict)
	if created != len(reports) || conflicts != 0 {
		t.Errorf("%d PolicyReports created and %d creates answered 409 for %d reports (%d create requests)",
			created, conflicts, len(reports), requests.GetIn("create", "policyreports", "crowd"))
	}
	seen := map[string]bool{}
	for _, r := range reports {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 1536*1024 {
			t.Errorf("report %s is %d bytes, over the object size limit", r.Name, len(data))
		}
		var chunk v1alpha2.PolicyReportSummary
		for _, res := range r.Results {
			if seen[res.Resources[0].Name] {
				t.Errorf("%s reported twice", res.Resources[0].Name)
			}
			seen[res.Resources[0].Name] = true
			if res.Result == v1alpha2.StatusWarn {
				chunk.Warn++
			}
		}
		if chunk.Warn != r.Summary.Warn {
			t.Errorf("report %s lists %d warnings but its summary says %d", r.Name, chunk.Warn, r.Summary.Warn)
		}
	}
}

// A policy's own resync interval re-reads its objects periodically; an unchanged cluster gets no report writes.
func TestResyncIntervalAnnotation(t *testing.T) {
	mustApply(t, widgetCRD("resyncers", "Resyncer", apiextensionsv1.NamespaceScoped), namespace("resync"))
	mustApply(t, widget("Resyncer", "resync", "big", 9), widget("Resyncer", "resync", "small", 1))
	crd := widgetCRD("resyncers", "Resyncer", apiextensionsv1.NamespaceScoped,
		apiextensionsv1.ValidationRule{Rule: "self.replicas <= 5", Message: "replicas must be at most 5"})
	crd.Annotations = map[string]string{"celaudit.io/resync-interval": "1s"}
	mustApply(t, crd)

	counter := &envtestutil.RequestCounter{}
	op, _ := envtestutil.StartOperator(t, counter.Wrap(env.Config), envtestutil.TestOptions())
	envtestutil.WaitSettled(t, op)
	expectReport(t, "resync", 1, "fail big: spec: Invalid value: replicas must be at most 5")

	// Two resyncs: the second LIST has begun, and once the operator is settled it has been evaluated.
	counter.Reset()
	before := mustPublishedIn(t, "resync")
	envtestutil.Eventually(t, 30*time.Second, func() error {
		if lists := counter.Get("list", "resyncers"); lists < 2 {
			return fmt.Errorf("a 1s resync interval re-read the objects %d times, waiting for 2", lists)
		}
		return nil
	})
	envtestutil.WaitSettled(t, op)
	// The API server enforces the rule: the marker passes, which the summary counts.
	mustApply(t, widget("Resyncer", "resync", "marker", 1))
	expectOnlyMarkerWritten(t, counter, "resync", before, "pass marker")
	if w := counter.Writes("policyreports"); w != 1 {
		t.Fatalf("resyncs of an unchanged cluster: %d report writes, want 1 (the marker's): %v", w, counter.Snapshot())
	}
}
