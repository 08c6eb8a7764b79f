package chart_test

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
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// The objects of the forbidden-params scenario: in namespace paramsNS, ConfigMaps with one and with three
// keys, and a ValidatingAdmissionPolicy that allows at most spec.maxKeys keys, read from a Limit (a CRD of
// group limitGroup, which the restricted chart does not grant) named by its binding's paramRef.
const (
	paramsNS    = "team-p"
	limitGroup  = "example.org"
	limitCRD    = "limits." + limitGroup
	limitPolicy = "configmaps-within-limit"
	limitMsg    = "too many keys"
)

// TestChartIdentityRestrictedParams runs the operator as the chart installs it with rbac.readAccess=restricted,
// with a binding whose params are of a CRD group celaudit may not read: each object the binding covers gets an
// error result naming the param resource, the missing permission and the label that grants it (not a sync
// timeout), and the rest of the audit goes on. Creating a labelled ClusterRole, aggregated into the chart's
// reader ClusterRole, has the binding evaluated with its params, without a restart.
func TestChartIdentityRestrictedParams(t *testing.T) {
	env := envtestutil.StartForTest(t)
	env.AggregateClusterRoles(t)
	inst := env.ChartIdentity(t, "--set", "rbac.readAccess=restricted")
	seedLimitedConfigMaps(t, env)

	op, _ := envtestutil.StartOperator(t, inst.Config, inst.Options(t))
	envtestutil.WaitSettled(t, op)

	const cause = `params not read: forbidden: missing permission to list and watch "limits" in API group "example.org", ` +
		`the resource of the paramKind; to grant it, create a ClusterRole labelled celaudit.io/aggregate-to-reader: "true" ` +
		`with a rule allowing get, list and watch on it; celaudit retries with backoff and reads it without a restart ` +
		`(limits.example.org "default" is forbidden: User "system:serviceaccount:celaudit-system:celaudit-controller-manager" ` +
		`cannot list resource "limits" in API group "example.org" at the cluster scope)`
	expectMessages(t, env, paramsNS,
		"error "+limitPolicy+" few: "+cause,
		"error "+limitPolicy+" many: "+cause)

	// Told where users look, once: on the binding.
	envtestutil.Eventually(t, time.Minute, func() error {
		var events eventsv1.EventList
		if err := env.Client.List(context.Background(), &events); err != nil {
			return err
		}
		var notes []string
		for _, e := range events.Items {
			if e.Regarding.Kind == "ValidatingAdmissionPolicyBinding" && e.Regarding.Name == limitPolicy &&
				e.Type == corev1.EventTypeWarning && e.Reason == controllers.ReasonParamsNotRead {
				notes = append(notes, e.Note)
			}
		}
		want := []string{"Params cannot be read: " + strings.TrimPrefix(cause, "params not read: ") +
			". Every object the binding matches gets an error result until they can"}
		if !slices.Equal(notes, want) {
			return fmt.Errorf("Warning Events %s about binding %s:\n got %q\nwant %q", controllers.ReasonParamsNotRead, limitPolicy, notes, want)
		}
		return nil
	})

	grant := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "example-org-celaudit-read", Labels: map[string]string{controllers.ReaderAggregationLabel: "true"}},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{limitGroup}, Resources: []string{"limits"}, Verbs: []string{"get", "list", "watch"}}},
	}
	must(t, env.Client.Create(context.Background(), grant))
	expectMessages(t, env, paramsNS, "warn "+limitPolicy+" many: "+limitMsg)
}

// seedLimitedConfigMaps stores the Limit CRD and its object "default" (at most 2 keys), the ConfigMaps and
// the policy with its binding (see paramsNS).
func seedLimitedConfigMaps(t *testing.T, env *envtestutil.Env) {
	t.Helper()
	ctx := context.Background()
	crd := intFieldCRD(limitCRD, limitGroup, "Limit", apiextensionsv1.ClusterScoped, "maxKeys")
	must(t, env.Client.Create(ctx, crd))
	must(t, envtestutil.WaitEstablished(ctx, env.Client, limitCRD))
	must(t, envtestutil.Apply(ctx, env.Client, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": limitGroup + "/v1", "kind": "Limit",
		"metadata": map[string]any{"name": "default"},
		"spec":     map[string]any{"maxKeys": int64(2)},
	}}))
	must(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: paramsNS}}))
	for name, data := range map[string]map[string]string{"few": {"a": "1"}, "many": {"a": "1", "b": "2", "c": "3"}} {
		must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: paramsNS, Name: name}, Data: data}))
	}
	must(t, env.Client.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: limitPolicy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: limitGroup + "/v1", Kind: "Limit"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.data) || size(object.data) <= params.spec.maxKeys", Message: limitMsg,
			}},
		},
	}))
	must(t, env.Client.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: limitPolicy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        limitPolicy,
			ParamRef:          &admissionregistrationv1.ParamRef{Name: "default", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: paramsNS},
			}},
		},
	}))
}

// expectMessages waits until the results the reports of namespace ns list are want ("verdict policy object:
// message").
func expectMessages(t *testing.T, env *envtestutil.Env, ns string, want ...string) {
	t.Helper()
	slices.Sort(want)
	envtestutil.Eventually(t, 2*time.Minute, func() error {
		var reports v1alpha2.PolicyReportList
		if err := env.Client.List(context.Background(), &reports, client.InNamespace(ns)); err != nil {
			return err
		}
		var got []string
		for _, r := range reports.Items {
			for _, res := range r.Results {
				name := ""
				if len(res.Resources) > 0 {
					name = res.Resources[0].Name
				}
				got = append(got, fmt.Sprintf("%s %s %s: %s", res.Result, res.Policy, name, res.Message))
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("results in namespace %s:\n got %q\nwant %q", ns, got, want)
		}
		return nil
	})
}
