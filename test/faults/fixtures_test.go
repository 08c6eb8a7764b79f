package faults_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/test/envtestutil"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// cluster is what each scenario audits: configmaps in a few namespaces, a third of which break (warn: the binding audits) the policy
// "no-bad-key", and that policy with its binding.
type cluster struct {
	namespaces []string
	perNS      int
}

// policyName is the ValidatingAdmissionPolicy every scenario audits.
const policyName = "no-bad-key"

// badMessage is the message of its failures.
const badMessage = "configmaps must not have the key bad"

// create stores the namespaces, configmaps, policy and binding of c.
func (c cluster) create(t *testing.T, cl client.Client) {
	t.Helper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "!has(object.data) || !('bad' in object.data)", Message: badMessage}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policyName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
			// Only the scenario's namespaces: the control plane's own configmaps are no business of it.
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"faults": "audited"},
			}},
		},
	}
	for _, ns := range c.namespaces {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"faults": "audited"}}}
		if err := cl.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		for i := range c.perNS {
			if err := cl.Create(ctx, configMap(ns, i, i%3 == 0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cl.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
}

// configMap returns the i-th configmap of namespace, with the key bad when bad is set.
func configMap(namespace string, i int, bad bool) *corev1.ConfigMap {
	data := map[string]string{"good": "yes"}
	if bad {
		data["bad"] = "yes"
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("cm-%03d", i)},
		Data:       data,
	}
}

// failures returns how many configmaps of c fail the policy.
func (c cluster) failures() int {
	n := 0
	for i := range c.perNS {
		if i%3 == 0 {
			n++
		}
	}
	return n * len(c.namespaces)
}

// options returns the operator's options of the scenarios: small LIST pages, so that a first audit reads
// several pages of each resource, and the results that are not passes.
func options() controllers.Options {
	o := envtestutil.TestOptions()
	o.PageSize = 5
	o.ReportVerdicts = "fail,warn,error"
	o.ReadBackoff = 200 * 1e6 // 200ms
	return o
}

// failResults waits until the reports of c's namespaces list want fail results, and returns them.
func countResults(ctx context.Context, cl client.Reader, namespaces []string) (int, error) {
	lines, err := envtestutil.ReportResults(ctx, cl, namespaces...)
	if err != nil {
		return 0, err
	}
	return len(lines), nil
}
