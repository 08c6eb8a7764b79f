package controllers_test

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// logBuffer is a logger that keeps every line, at every verbosity.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.lines = append(b.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 10})
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

// klogVerbosity is the most verbose global klog output the test captures. At 8 and above client-go logs the
// body of every request and response of clients without a contextual logger, this test's own creation of
// the Secrets included, as kubectl -v=8 does. celaudit does not expose klog's flags, so it runs at 0; 7
// covers everything the upstream CEL and admission code logs (messageExpression errors and rejected messages
// at 2). The operator's own logger is captured at every verbosity, client-go's dumps of the operator's
// requests included.
const klogVerbosity = "7"

// captureKlog routes the upstream libraries' klog output, at klogVerbosity, to log until the test ends.
// klog's settings are process-wide: they are restored afterwards.
func captureKlog(t *testing.T, log logr.Logger) {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	previous := fs.Lookup("v").Value.String()
	if err := fs.Set("v", klogVerbosity); err != nil {
		t.Fatal(err)
	}
	klog.SetLogger(log)
	t.Cleanup(func() {
		klog.ClearLogger()
		_ = fs.Set("v", previous)
	})
}

// The reproduction, against the API server: validations whose errors quote a Secret's password or
// its last-applied-configuration annotation (which holds the stringData of a Secret written with kubectl
// apply), in an unbound policy, and messageExpressions and audit annotations reading the same, in a bound
// one. No value of either Secret reaches a report or the operator's log; the results are there all the same.
func TestSecretDataNeverReported(t *testing.T) {
	const (
		ns       = "secret-leak"
		label    = "secret-leak"
		password = "S3cr3t-P4ssw0rd-1234"
		apiKey   = "APPLIEDKEY-0123456789"
	)
	encodedPassword := base64.StdEncoding.EncodeToString([]byte(password))
	encodedAPIKey := base64.StdEncoding.EncodeToString([]byte(apiKey))
	// What kubectl apply leaves on a Secret applied with data and stringData.
	lastApplied := `{"apiVersion":"v1","data":{"password":"` + encodedPassword + `"},"kind":"Secret",` +
		`"metadata":{"annotations":{},"name":"applied","namespace":"` + ns + `"},"stringData":{"apikey":"` + apiKey + `"},"type":"Opaque"}`
	secretValues := []string{password, encodedPassword, apiKey, encodedAPIKey, lastApplied}

	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"},
			Data:       map[string][]byte{"password": []byte(password)},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "applied", Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: lastApplied}},
			Data:       map[string][]byte{"password": []byte(password)},
			StringData: map[string]string{"apikey": apiKey},
		},
	)

	logs := &logBuffer{}
	captureKlog(t, logs.logger().WithName("upstream"))
	opts := envtestutil.TestOptions()
	opts.Logger = logs.logger()
	_, _ = envtestutil.StartOperator(t, env.Config, opts)

	const (
		passwordRegex = "!has(object.data) || !('password' in object.data) || 'x'.matches('(' + string(object.data.password))"
		appliedRegex  = "!has(object.metadata.annotations) || !('kubectl.kubernetes.io/last-applied-configuration' in object.metadata.annotations) || " +
			"'x'.matches('(' + object.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration'])"
		appliedAnnotation = "object.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']"
	)
	secretRules := &admissionregistrationv1.MatchResources{
		NamespaceSelector: nsSelector(label),
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
		}}},
	}
	unbound := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "secret-leak-regex"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: secretRules.DeepCopy(),
			Validations:      []admissionregistrationv1.Validation{{Expression: passwordRegex}, {Expression: appliedRegex}},
		},
	}
	bound := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "secret-leak-messages"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: secretRules.DeepCopy(),
			Validations: []admissionregistrationv1.Validation{
				{Expression: "object.metadata.name == 'never'", MessageExpression: "'password is ' + string(object.data.password)"},
				{Expression: "object.type == 'never'", MessageExpression: "'applied ' + " + appliedAnnotation},
				{Expression: "size(object.metadata.name) == 0", MessageExpression: "'name is ' + object.metadata.name"},
			},
			AuditAnnotations: []admissionregistrationv1.AuditAnnotation{
				{Key: "password", ValueExpression: "string(object.data.password)"},
				{Key: "applied", ValueExpression: "string(" + appliedAnnotation + ")"},
				{Key: "name", ValueExpression: "string(object.metadata.name)"},
			},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "secret-leak-messages"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        bound.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)},
		},
	}
	create(t, unbound, bound, binding)
	t.Cleanup(func() {
		// Policies are cluster-wide: later tests must not audit these.
		for _, o := range []client.Object{binding, bound, unbound} {
			_ = env.Client.Delete(context.Background(), o)
		}
	})

	// The results are there (two Secrets, nine rows) before the reports are searched for secret values.
	envtestutil.Eventually(t, 30*time.Second, func() error {
		got, _, err := reportResults(context.Background(), ns)
		if err != nil {
			return err
		}
		if len(got) < 9 {
			return fmt.Errorf("report of %q lists %d results, want at least 9: %q", ns, len(got), got)
		}
		return nil
	})
	list := &v1alpha2.PolicyReportList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	annotations := 0
	for _, r := range list.Items {
		dump := fmt.Sprintf("%+v", r)
		for _, v := range secretValues {
			if strings.Contains(dump, v) {
				t.Errorf("report %s holds the secret value %q", r.Name, v)
			}
		}
		for _, res := range r.Results {
			for k, v := range res.Properties {
				if strings.HasPrefix(k, "auditAnnotation.") {
					if k != "auditAnnotation.name" {
						t.Errorf("audit annotation %s=%q published for a Secret", k, v)
					}
					annotations++
				}
			}
		}
	}
	if annotations == 0 {
		t.Error("the harmless audit annotation was not published")
	}
	log := logs.String()
	if log == "" {
		t.Error("nothing was logged: the log is not captured")
	}
	for _, v := range secretValues {
		if strings.Contains(log, v) {
			t.Errorf("the log holds the secret value %q", v)
		}
	}

	// The results themselves: an error per failing validation, in the API server's form, and the fallback
	// messages of the messageExpressions reading data or annotations (the harmless one is evaluated).
	withheld := func(expression string) string {
		return "expression '" + expression + "' resulted in error: details withheld: the expression may read the data, stringData or annotations of a Secret"
	}
	expectReport(t, ns, 0,
		"error creds: "+withheld(passwordRegex),
		"error applied: "+withheld(passwordRegex),
		"error applied: "+withheld(appliedRegex),
		"warn creds: failed expression: object.metadata.name == 'never'",
		"warn creds: failed expression: object.type == 'never'",
		"warn creds: name is creds",
		"warn applied: failed expression: object.metadata.name == 'never'",
		"warn applied: failed expression: object.type == 'never'",
		"warn applied: name is applied",
	)
}
