package controllers_test

import (
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// TestParamChangeWhileAnotherPolicyCompiles holds the compile of one policy and changes the param of
// another: the change must reach the reports while the compile is still held, since reconciles of different
// policies share nothing but a map.
func TestParamChangeWhileAnotherPolicyCompiles(t *testing.T) {
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cc-a", Labels: map[string]string{"cc-size": "yes"}}},
		configMap("cc-a", "limits", map[string]string{"max": "20"}),
		configMap("cc-a", "big", map[string]string{"size": "10"}),
	)
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseCompile := func() { releaseOnce.Do(func() { close(release) }) }
	opts := envtestutil.TestOptions()
	opts.Workers = 4
	controllers.HoldVAPCompile(&opts, func(policy string) {
		if policy != "cc-slow" {
			return
		}
		select {
		case held <- struct{}{}:
		default:
		}
		<-release
	})
	_, _ = envtestutil.StartOperator(t, env.Config, opts)
	t.Cleanup(releaseCompile) // before the operator stops: a held reconcile would keep it from stopping

	sizePolicy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "cc-size"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configMapRule()}},
			Validations: []admissionregistrationv1.Validation{{
				Expression:        "!has(object.data.size) || int(object.data.size) <= int(params.data.max)",
				MessageExpression: "'size ' + object.data.size + ' exceeds ' + params.data.max",
			}},
		},
	}
	sizeBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cc-size"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "cc-size",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
			ParamRef:          &admissionregistrationv1.ParamRef{Name: "limits", Namespace: "cc-a", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("cc-size")},
		},
	}
	slowPolicy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "cc-slow"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: nsSelector("cc-size"),
				ResourceRules:     []admissionregistrationv1.NamedRuleWithOperations{configMapRule()},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "true"}},
		},
	}
	deleteAfter(t, sizeBinding, sizePolicy, slowPolicy)
	create(t, sizePolicy, sizeBinding)
	// limits itself passes (it has no size); big passes under max 20.
	expectReport(t, "cc-a", 2)

	create(t, slowPolicy)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the compile of cc-slow never started")
	}
	update(t, configMap("cc-a", "limits", nil), func(c *corev1.ConfigMap) { c.Data["max"] = "5" })
	expectReport(t, "cc-a", 1, "warn big: size 10 exceeds 5")

	releaseCompile()
	// Once compiled, the held policy passes both objects.
	expectReport(t, "cc-a", 3, "warn big: size 10 exceeds 5")
}
