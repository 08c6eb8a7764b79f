package controllers_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// TestMatchConditionsExcludeScenario: an object an AuditPolicy's matchConditions exclude, by a condition that
// is false or, under failurePolicy Ignore, by one that errors, is admitted by the API server without a word.
// celaudit says nothing about it either: no result listed, none counted in the report's summary, in the
// AuditPolicy's status (matched counts only the objects judged) or in the metrics.
func TestMatchConditionsExcludeScenario(t *testing.T) {
	const msg = "configmaps must name an owner"
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mce-a", Labels: map[string]string{"mce": "yes"}}},
		configMap("mce-a", "app-ok", map[string]string{"tier": "web", "owner": "team-a"}), // judged: pass
		configMap("mce-a", "app-bad", map[string]string{"tier": "web"}),                   // judged: warn
		configMap("mce-a", "sys-bad", map[string]string{"tier": "web"}),                   // excluded: apps is false
		configMap("mce-a", "app-nodata", nil),                                             // excluded: web errors, Ignore
	)
	deleteAuditPolicyAfter(t, "mce-owner")
	id := env.ShippedIdentity(t)
	op, _ := envtestutil.StartOperator(t, id.Config, auditPolicyOptions())

	ap := ownerAuditPolicy("mce-owner", "mce", msg)
	ap.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	ap.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{
		{Name: "apps", Expression: "object.metadata.name.startsWith('app-')"},
		{Name: "web", Expression: "object.data.tier == 'web'"}, // no such key for a ConfigMap without data
	}
	create(t, ap)

	// Only the judged objects are listed and counted, whatever the verdicts listed (skips are).
	envtestutil.Eventually(t, 30*time.Second, func() error {
		got, sum, err := reportResults(t.Context(), "mce-a")
		if err != nil {
			return err
		}
		want := []string{"warn app-bad: " + msg}
		if !slices.Equal(got, want) || sum != (v1alpha2.PolicyReportSummary{Pass: 1, Warn: 1}) {
			return fmt.Errorf("report of mce-a:\n got %q, summary %+v\nwant %q, summary pass 1, warn 1", got, sum, want)
		}
		return nil
	})
	expectAuditPolicy(t, "mce-owner", func(ap *v1alpha1.AuditPolicy) error {
		if err := statusIs(2, 1, 0, 1, 0, metav1.ConditionFalse)(ap); err != nil {
			return err
		}
		if ap.Status.Skip != 0 {
			return fmt.Errorf("status counts %d skips", ap.Status.Skip)
		}
		return nil
	})
	expectPolicyMetrics(t, op, "auditpolicy", "mce-owner", readinessMetrics(2, 1, 1, 0, 1, 0, false))
}
