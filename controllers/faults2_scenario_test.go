package controllers_test

import (
	"context"
	"fmt"
	"net/http"
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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
