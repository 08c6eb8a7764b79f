package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// labelledConfigMap returns a config map with labels.
func labelledConfigMap(ns, name string, lbls map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}}
}

// policyMetrics returns op's per-policy metrics of one policy, keyed by name and the labels other than source
// and policy (`celaudit_policy_results{result="fail"}`).
func policyMetrics(op *controllers.Operator, source, policy string) (map[string]float64, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(controllers.PolicyMetrics(op)); err != nil {
		return nil, err
	}
	families, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var other []string
			matches := 0
			for _, l := range m.GetLabel() {
				switch {
				case l.GetName() == "source" && l.GetValue() == source, l.GetName() == "policy" && l.GetValue() == policy:
					matches++
				case l.GetName() != "source" && l.GetName() != "policy":
					other = append(other, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
			}
			if matches != 2 {
				continue
			}
			key := f.GetName()
			if len(other) > 0 {
				key += "{" + strings.Join(other, ",") + "}"
			}
			out[key] = m.GetGauge().GetValue()
		}
	}
	return out, nil
}

// expectPolicyMetrics waits until op's metrics of one policy are want (nil: none).
func expectPolicyMetrics(t *testing.T, op *controllers.Operator, source, policy string, want map[string]float64) {
	t.Helper()
	envtestutil.Eventually(t, 30*time.Second, func() error {
		got, err := policyMetrics(op, source, policy)
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("metrics of %s/%s:\n got %v\nwant %v", source, policy, got, want)
		}
		return nil
	})
}

// readinessMetrics are the metrics of a policy with these counts.
func readinessMetrics(matched, violating, pass, fail, warn, errs int, safe bool) map[string]float64 {
	s := 0.0
	if safe {
		s = 1
	}
	return map[string]float64{
		"celaudit_policy_matched_objects":         float64(matched),
		"celaudit_policy_violating_objects":       float64(violating),
		"celaudit_policy_safe_to_enforce":         s,
		`celaudit_policy_results{result="pass"}`:  float64(pass),
		`celaudit_policy_results{result="fail"}`:  float64(fail),
		`celaudit_policy_results{result="warn"}`:  float64(warn),
		`celaudit_policy_results{result="error"}`: float64(errs),
		`celaudit_policy_results{result="skip"}`:  0,
	}
}

// TestReadinessScenario follows a policy from violations to safe to enforce and back: its metrics follow the
// objects, and an Event on the policy tells each change of readiness once, not each change of counts.
func TestReadinessScenario(t *testing.T) {
	owned := map[string]string{"owner": "team-a"}
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rd-a", Labels: map[string]string{"rd-audit": "yes"}}},
		labelledConfigMap("rd-a", "ok", owned),
		labelledConfigMap("rd-a", "bad", nil),
	)
	op, _ := envtestutil.StartOperator(t, env.Config, envtestutil.TestOptions())
	policy, binding := boundPolicy("rd-owner", "has(object.metadata.labels) && 'owner' in object.metadata.labels", "an owner label is required",
		coreRule("configmaps"), []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("rd-audit")})
	bindFirst(t, binding, func() { create(t, policy) })
	deleteAfter(t, binding, policy)

	const kind = "ValidatingAdmissionPolicy"
	notSafe := "Warning NotSafeToEnforce: 1 of 2 matched objects violate the policy (0 fail, 1 warn, 0 error); violations in namespace rd-a (1)"
	expectPolicyMetrics(t, op, "vap", "rd-owner", readinessMetrics(2, 1, 1, 0, 1, 0, false))
	expectEvents(t, kind, "rd-owner", notSafe)

	// The violation is fixed: the policy is safe to enforce.
	update(t, labelledConfigMap("rd-a", "bad", nil), func(cm *corev1.ConfigMap) { cm.Labels = owned })
	safe := "Normal SafeToEnforce: 0 of 2 matched objects violate the policy (0 fail, 0 warn, 0 error)"
	expectPolicyMetrics(t, op, "vap", "rd-owner", readinessMetrics(2, 0, 2, 0, 0, 0, true))
	expectEvents(t, kind, "rd-owner", notSafe, safe)

	// More objects that pass change the counts, not the readiness: no Event.
	create(t, labelledConfigMap("rd-a", "ok-2", owned))
	expectPolicyMetrics(t, op, "vap", "rd-owner", readinessMetrics(3, 0, 3, 0, 0, 0, true))

	// A new violation: not safe again. The recorder makes the second NotSafeToEnforce Event a series of the first,
	// whose note it keeps (the metrics have the current counts). The SafeToEnforce Event was recorded once: the
	// change of counts in between recorded none.
	create(t, labelledConfigMap("rd-a", "bad-2", nil))
	expectPolicyMetrics(t, op, "vap", "rd-owner", readinessMetrics(4, 1, 3, 0, 1, 0, false))
	expectEvents(t, kind, "rd-owner", notSafe+" (series of 2)", safe)

	// A policy that is removed leaves the metrics. (The policy goes first: without its binding it would be
	// audited on every config map, and a rescan under way as it is removed may write results back.)
	ctx := context.Background()
	for _, o := range []client.Object{policy, binding} {
		if err := env.Client.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	expectPolicyMetrics(t, op, "vap", "rd-owner", map[string]float64{})
}
