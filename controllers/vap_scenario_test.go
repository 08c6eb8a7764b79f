package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/test/envtestutil"
)

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func configMapRule() admissionregistrationv1.NamedRuleWithOperations {
	return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
}

func nsSelector(label string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{label: "yes"}}
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

func update[T client.Object](t *testing.T, obj T, mutate func(T)) {
	t.Helper()
	ctx := context.Background()
	envtestutil.Eventually(t, 10*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate(obj)
		return env.Client.Update(ctx, obj)
	})
}

// resultProperty returns a property of the listed result for object name in namespace ns.
func resultProperty(ns, name, key string) (string, error) {
	list := &v1alpha2.PolicyReportList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		return "", err
	}
	for _, r := range list.Items {
		for _, res := range r.Results {
			if len(res.Resources) > 0 && res.Resources[0].Name == name {
				return res.Properties[key], nil
			}
		}
	}
	return "", fmt.Errorf("no result for %s/%s", ns, name)
}

func TestVAPRolloutScenario(t *testing.T) {
	ctx := context.Background()
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vs-a", Labels: map[string]string{"vs-owner": "yes"}}},
		configMap("vs-a", "ok", map[string]string{"owner": "team-a"}),
		configMap("vs-a", "bad", map[string]string{"size": "3"}),
	)
	_, _ = envtestutil.StartOperator(t, env.Config, envtestutil.TestOptions())

	const msg = "configmaps must name an owner"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "vs-owner", Annotations: map[string]string{"celaudit.io/category": "Ownership", "celaudit.io/severity": "high"}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configMapRule()}},
			Validations:      []admissionregistrationv1.Validation{{Expression: "has(object.data) && 'owner' in object.data", Message: msg}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "vs-owner-binding"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "vs-owner",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("vs-owner")},
		},
	}
	create(t, policy, binding)

	// Rollout step one, [Warn, Audit]: the stored violation shows as a warning.
	expectReport(t, "vs-a", 1, "warn bad: "+msg)
	if v, err := resultProperty("vs-a", "bad", "validationActions"); err != nil || v != "Warn,Audit" {
		t.Fatalf("validationActions property = %q, %v", v, err)
	}

	// Step two, Deny: the same object now fails, with the message the API server denies it with.
	update(t, binding, func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	})
	expectReport(t, "vs-a", 1, "fail bad: "+msg)
	envtestutil.Eventually(t, 10*time.Second, func() error {
		err := env.Client.Create(ctx, configMap("vs-a", "probe", map[string]string{"size": "1"}), client.DryRunAll)
		want := "ValidatingAdmissionPolicy 'vs-owner' with binding 'vs-owner-binding' denied request: " + msg
		if err == nil || !strings.Contains(err.Error(), want) {
			return fmt.Errorf("API server answer %w does not contain %q", err, want)
		}
		return nil
	})

	// Fixing the object turns its result into a pass; a new violation appears.
	update(t, configMap("vs-a", "bad", nil), func(c *corev1.ConfigMap) { c.Data["owner"] = "team-b" })
	expectReport(t, "vs-a", 2)
	update(t, binding, func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
	})
	// Deny bindings reject the write, so store the violation once the API server applies the Warn binding.
	envtestutil.Eventually(t, 10*time.Second, func() error {
		return env.Client.Create(ctx, configMap("vs-a", "late", map[string]string{"size": "9"}))
	})
	expectReport(t, "vs-a", 2, "warn late: "+msg)

	// The namespace loses the label the binding selects: its objects are no longer covered by the binding.
	update(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vs-a"}}, func(n *corev1.Namespace) { delete(n.Labels, "vs-owner") })
	expectReport(t, "vs-a", 0)
	update(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vs-a"}}, func(n *corev1.Namespace) { n.Labels["vs-owner"] = "yes" })
	expectReport(t, "vs-a", 2, "warn late: "+msg)

	// Binding deleted: the policy is audited as unbound, [Audit] with no binding.
	if err := env.Client.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 30*time.Second, func() error {
		b, err := resultProperty("vs-a", "late", "binding")
		if err != nil {
			return err
		}
		a, _ := resultProperty("vs-a", "late", "validationActions")
		if b != "" || a != "Audit" {
			return fmt.Errorf("binding=%q validationActions=%q, want the unbound form", b, a)
		}
		return nil
	})
	expectReport(t, "vs-a", 2, "warn late: "+msg)

	// Policy deleted: its results are gone.
	if err := env.Client.Delete(ctx, policy); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 30*time.Second, func() error {
		list := &v1alpha2.PolicyReportList{}
		if err := env.Client.List(ctx, list, client.InNamespace("vs-a")); err != nil {
			return err
		}
		for _, r := range list.Items {
			if len(r.Results) > 0 || r.Summary.Pass > 0 {
				return fmt.Errorf("results remain after the policy was deleted: %+v", r.Summary)
			}
		}
		return nil
	})
}

func TestVAPParamChangeScenario(t *testing.T) {
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vp-params"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vp-b", Labels: map[string]string{"vp-size": "yes"}}},
		configMap("vp-params", "limits", map[string]string{"max": "20"}),
		configMap("vp-b", "big", map[string]string{"size": "10"}),
		configMap("vp-b", "small", map[string]string{"size": "2"}),
	)
	counter := &envtestutil.RequestCounter{}
	opts := envtestutil.TestOptions()
	// One LIST request per read of the ConfigMaps, however many earlier tests left in the cluster.
	opts.PageSize = 1 << 20
	_, _ = envtestutil.StartOperator(t, counter.Wrap(env.Config), opts)
	create(t,
		&admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "vp-size"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configMapRule()}},
				Validations: []admissionregistrationv1.Validation{{
					Expression:        "int(object.data.size) <= int(params.data.max)",
					MessageExpression: "'size ' + object.data.size + ' exceeds ' + params.data.max",
				}},
			},
		},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "vp-size"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        "vp-size",
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
				ParamRef:          &admissionregistrationv1.ParamRef{Name: "limits", Namespace: "vp-params", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
				MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("vp-size")},
			},
		},
	)
	expectReport(t, "vp-b", 2)

	// ConfigMaps are the param kind, but a ConfigMap that no binding reads as a param is only an audited
	// object: changing one re-evaluates that object alone, without re-reading any other. The operator reads
	// ConfigMap changes in the order they are made: the pass of the one created last tells that it has seen
	// the others.
	counter.Reset()
	create(t, configMap("vp-params", "unrelated", map[string]string{"max": "1"}))
	update(t, configMap("vp-b", "small", nil), func(c *corev1.ConfigMap) { c.Data["size"] = "3" })
	create(t, configMap("vp-b", "tiny", map[string]string{"size": "1"}))
	expectReport(t, "vp-b", 3)

	// Tightening the param object re-reads the ConfigMaps once, and fails the objects that exceed the new
	// limit. Param changes are seen in the order they are made too: had the ConfigMaps above been taken for
	// params, their re-reading would have been asked for before this one.
	update(t, configMap("vp-params", "limits", nil), func(c *corev1.ConfigMap) { c.Data["max"] = "5" })
	expectReport(t, "vp-b", 2, "fail big: size 10 exceeds 5")
	if n := counter.Get("list", "configmaps"); n != 1 {
		t.Fatalf("changing ConfigMaps that are not params, then the param, caused %d ConfigMap LISTs, want 1 (the param's read): %v", n, counter.Snapshot())
	}
	if v, err := resultProperty("vp-b", "big", "param"); err != nil || v != "vp-params/limits" {
		t.Fatalf("param property = %q, %v", v, err)
	}

	// The param object vanishes: with parameterNotFoundAction Deny the binding cannot be configured, which
	// the API server treats under failurePolicy (Fail): every covered object is an error.
	if err := env.Client.Delete(context.Background(), configMap("vp-params", "limits", nil)); err != nil {
		t.Fatal(err)
	}
	const notFound = "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
	expectReport(t, "vp-b", 0, "error big: "+notFound, "error small: "+notFound, "error tiny: "+notFound)
	if v, err := resultProperty("vp-b", "big", "failurePolicy"); err != nil || v != "Fail" {
		t.Fatalf("failurePolicy property = %q, %v", v, err)
	}
	envtestutil.Eventually(t, 10*time.Second, func() error {
		err := env.Client.Create(context.Background(), configMap("vp-b", "probe", map[string]string{"size": "1"}), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), notFound) {
			return fmt.Errorf("API server answer %w does not contain %q", err, notFound)
		}
		return nil
	})
}
