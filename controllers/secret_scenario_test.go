package controllers_test

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"reflect"
	"slices"
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

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
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
	opts.AuditSecrets = true
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

// notAuditedSecrets is the message of the skip result of a policy covering Secrets without --audit-secrets.
const notAuditedSecrets = "not audited (v1/secrets): celaudit audits Secrets only with --audit-secrets (chart value audit.secrets)"

// secretGuess is a validation that fails on a Secret whose data.password, as stored (base64), starts with
// guess: what someone who may write policies but not read Secrets would try, one guess at a time.
func secretGuess(guess string) admissionregistrationv1.Validation {
	return admissionregistrationv1.Validation{
		Expression: "!has(object.data) || !('password' in object.data) || !string(object.data.password).startsWith('" + guess + "')",
		Message:    "the password starts with " + guess,
	}
}

// secretRule matches CREATE and UPDATE of Secrets.
func secretRule() admissionregistrationv1.NamedRuleWithOperations {
	return coreRule("secrets")
}

// guessAuditPolicy is an AuditPolicy in Audit on the Secrets of namespaces labelled label=yes.
func guessAuditPolicy(name, label, guess string) *v1alpha1.AuditPolicy {
	return &v1alpha1.AuditPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.AuditPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{secretRule()}},
			Validations:      []admissionregistrationv1.Validation{secretGuess(guess)},
			MatchResources:   &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)},
			Category:         "Credentials",
			Severity:         "high",
		},
	}
}

// guessVAP is an unbound ValidatingAdmissionPolicy on the Secrets of namespaces labelled label=yes: it has no
// effect on admission, and celaudit audits it all the same.
func guessVAP(name, label, guess string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: nsSelector(label),
				ResourceRules:     []admissionregistrationv1.NamedRuleWithOperations{secretRule()},
			},
			Validations: []admissionregistrationv1.Validation{secretGuess(guess)},
		},
	}
}

// auditPolicyAnswer is what an AuditPolicy's status tells about what it judged: counts and conditions,
// without times, and with its own name replaced, so that two policies' answers can be compared.
func auditPolicyAnswer(ap *v1alpha1.AuditPolicy) string {
	s := ap.Status
	var b strings.Builder
	fmt.Fprintf(&b, "matched %d pass %d fail %d warn %d error %d skip %d violations %d top %v",
		s.Matched, s.Pass, s.Fail, s.Warn, s.Error, s.Skip, s.Violations, s.TopNamespaces)
	conds := slices.Clone(s.Conditions)
	slices.SortFunc(conds, func(a, b metav1.Condition) int { return strings.Compare(a.Type, b.Type) })
	for _, c := range conds {
		fmt.Fprintf(&b, "; %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	return strings.ReplaceAll(b.String(), ap.Name, "<name>")
}

// sameAnswer waits until get gives the same, non-empty answer (a string, slice or map) for the right and the
// wrong guess, and returns it.
func sameAnswer[T any](t *testing.T, what string, get func(ctx context.Context, name string) (T, error), right, wrong string) T {
	t.Helper()
	var answer T
	envtestutil.Eventually(t, 30*time.Second, func() error {
		ctx := context.Background()
		r, err := get(ctx, right)
		if err != nil {
			return err
		}
		w, err := get(ctx, wrong)
		if err != nil {
			return err
		}
		if reflect.ValueOf(r).Len() == 0 {
			return fmt.Errorf("%s of %s: nothing yet", what, right)
		}
		if !reflect.DeepEqual(r, w) {
			return fmt.Errorf("%s differ:\n%s: %v\n%s: %v", what, right, r, wrong, w)
		}
		answer = r
		return nil
	})
	return answer
}

// policyResultLines returns "policy rule category/severity verdict name: message" for the listed results of
// celaudit's reports in namespace ns ("" for the cluster reports) of the policies whose name starts with
// prefix, sorted.
func policyResultLines(ctx context.Context, ns, prefix string) ([]string, error) {
	items, _, err := celauditResults(ctx, ns)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range items {
		if strings.HasPrefix(r.Policy, prefix) {
			out = append(out, fmt.Sprintf("%s %s %s/%s %s", r.Policy, r.Rule, r.Category, r.Severity, resultLine(r)))
		}
	}
	slices.Sort(out)
	return out, nil
}

// The oracle: two AuditPolicies in Audit and two unbound ValidatingAdmissionPolicies test a right
// and a wrong guess of a Secret's password. celaudit runs as its shipped ServiceAccount, which RBAC lets read
// every Secret. Without --audit-secrets it reads none, and the right and the wrong guess get the same answer
// everywhere it publishes one: AuditPolicy status, Events, per-policy metrics and reports, where each policy
// has one skip result about the resource. With it, the verdicts tell the right guess from the wrong one, as
// the README says.
func TestSecretsAuditedOnlyWhenAsked(t *testing.T) {
	const (
		ns       = "secret-oracle"
		label    = "secret-oracle"
		password = "hunter2-hunter2"
	)
	encoded := base64.StdEncoding.EncodeToString([]byte(password))
	right, wrong := encoded[:4], "bm9w" // "bm9w" is "nop", which the password does not start with
	if strings.HasPrefix(encoded, wrong) {
		t.Fatalf("the wrong guess %q is right for %q", wrong, encoded)
	}
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Data: map[string][]byte{"password": []byte(password)}},
	)
	const (
		apRight, apWrong   = "oracle-ap-right", "oracle-ap-wrong"
		vapRight, vapWrong = "oracle-vap-right", "oracle-vap-wrong"
	)
	for _, name := range []string{apRight, apWrong} {
		deleteAuditPolicyAfter(t, name)
	}
	deleteAfter(t, guessVAP(vapRight, label, right), guessVAP(vapWrong, label, wrong))
	id := env.ShippedIdentity(t)
	counter := &envtestutil.RequestCounter{}
	op, stop := envtestutil.StartOperator(t, counter.Wrap(id.Config), auditPolicyOptions())
	create(t,
		guessAuditPolicy(apRight, label, right), guessAuditPolicy(apWrong, label, wrong),
		guessVAP(vapRight, label, right), guessVAP(vapWrong, label, wrong),
	)

	// Without --audit-secrets: one skip about the resource per policy, the policy's category and severity on it.
	expectStrings(t, "results of the oracle policies", func(ctx context.Context) ([]string, error) {
		return policyResultLines(ctx, "", "oracle-")
	}, []string{
		apRight + " read (v1/secrets) Credentials/high skip : " + notAuditedSecrets,
		apWrong + " read (v1/secrets) Credentials/high skip : " + notAuditedSecrets,
		vapRight + " read (v1/secrets) ValidatingAdmissionPolicy/medium skip : " + notAuditedSecrets,
		vapWrong + " read (v1/secrets) ValidatingAdmissionPolicy/medium skip : " + notAuditedSecrets,
	})
	envtestutil.WaitSettled(t, op)
	if got, _, err := reportResults(context.Background(), ns); err != nil || len(got) != 0 {
		t.Errorf("results in namespace %s: %q, %v; want none", ns, got, err)
	}
	status := sameAnswer(t, "AuditPolicy status", func(ctx context.Context, name string) (string, error) {
		ap := &v1alpha1.AuditPolicy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, ap); err != nil {
			return "", err
		}
		if ap.Status.ObservedGeneration != ap.Generation || ap.Status.LastAuditTime == nil {
			return "", nil
		}
		return auditPolicyAnswer(ap), nil
	}, apRight, apWrong)
	counted := &v1alpha1.AuditPolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: apRight}, counted); err != nil {
		t.Fatal(err)
	}
	if s := counted.Status; s.Skip != 1 || s.Pass+s.Fail+s.Warn+s.Error != 0 {
		t.Errorf("status of both AuditPolicies: %s; want the one skip counted, no verdict", status)
	}
	for _, source := range []struct{ kind, right, wrong string }{
		{"ValidatingAdmissionPolicy", vapRight, vapWrong},
		{"AuditPolicy", apRight, apWrong},
	} {
		metrics := sameAnswer(t, source.kind+" metrics", func(_ context.Context, name string) (map[string]float64, error) {
			src := map[string]string{"ValidatingAdmissionPolicy": "vap", "AuditPolicy": "auditpolicy"}[source.kind]
			return policyMetrics(op, src, name)
		}, source.right, source.wrong)
		if metrics[`celaudit_policy_results{result="skip"}`] != 1 || metrics[`celaudit_policy_results{result="fail"}`]+metrics[`celaudit_policy_results{result="warn"}`] != 0 {
			t.Errorf("%s metrics %v: want one skip, no violation", source.kind, metrics)
		}
	}
	// Readiness records an Event on each ValidatingAdmissionPolicy at the first complete audit: the same for
	// both. AuditPolicies get the same Events too (none at all, or the same ones).
	sameAnswer(t, "Events", func(ctx context.Context, name string) ([]string, error) {
		events, err := clusterObjectEvents(ctx, "ValidatingAdmissionPolicy", name)
		slices.Sort(events)
		return events, err
	}, vapRight, vapWrong)
	envtestutil.Eventually(t, 30*time.Second, func() error {
		ctx := context.Background()
		r, err := clusterObjectEvents(ctx, "AuditPolicy", apRight)
		if err != nil {
			return err
		}
		w, err := clusterObjectEvents(ctx, "AuditPolicy", apWrong)
		if err != nil {
			return err
		}
		slices.Sort(r)
		slices.Sort(w)
		if !slices.Equal(r, w) {
			return fmt.Errorf("Events differ:\n%s: %q\n%s: %q", apRight, r, apWrong, w)
		}
		return nil
	})
	for _, verb := range []string{"get", "list", "watch"} {
		if n := counter.Get(verb, "secrets"); n != 0 {
			t.Errorf("celaudit made %d %s requests of secrets without --audit-secrets", n, verb)
		}
	}
	if counter.Get("watch", "validatingadmissionpolicies") == 0 {
		t.Fatalf("no request of the operator was counted: %v", counter.Snapshot())
	}
	stop()

	// With --audit-secrets: the documented behaviour. The right guess violates, the wrong one passes.
	opts := auditPolicyOptions()
	opts.AuditSecrets = true
	withSecrets := &envtestutil.RequestCounter{}
	_, _ = envtestutil.StartOperator(t, withSecrets.Wrap(id.Config), opts)
	expectReport(t, ns, 2,
		"warn db: the password starts with "+right, // the AuditPolicy in Audit
		"warn db: the password starts with "+right, // the unbound policy, audited as bound with [Audit]
	)
	expectAuditPolicy(t, apRight, statusIs(1, 0, 0, 1, 0, metav1.ConditionFalse))
	expectAuditPolicy(t, apWrong, statusIs(1, 1, 0, 0, 0, metav1.ConditionTrue))
	expectStrings(t, "results of the oracle policies about resources", func(ctx context.Context) ([]string, error) {
		return policyResultLines(ctx, "", "oracle-")
	}, nil)
	if withSecrets.Get("list", "secrets") == 0 {
		t.Error("Secrets were not listed with --audit-secrets")
	}
}

// A policy whose paramKind is Secret has its params not read without --audit-secrets: each object its binding
// matches gets an error result saying why and how to enable it, and the policy a ParamsNotRead Warning Event,
// a ValidatingAdmissionPolicy and an AuditPolicy alike. No Secret is fetched.
func TestSecretParamsNotRead(t *testing.T) {
	const (
		ns    = "secret-params"
		label = "secret-params"
		name  = "secret-params"
	)
	secretParam := &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "Secret"}
	ref := &admissionregistrationv1.ParamRef{Name: "token", Namespace: ns, ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
	validation := admissionregistrationv1.Validation{Expression: "!string(params.data.token).startsWith('cGFy')", Message: "guessed"}
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token"}, Data: map[string][]byte{"token": []byte("param-token")}},
		configMap(ns, "cm", nil),
	)
	policy, binding := boundPolicy(name, validation.Expression, validation.Message, configMapRule(),
		[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}, &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)})
	policy.Spec.ParamKind = secretParam
	binding.Spec.ParamRef = ref
	ap := &v1alpha1.AuditPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-ap"},
		Spec: v1alpha1.AuditPolicySpec{
			ParamKind:        secretParam,
			ParamRef:         ref,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configMapRule()}},
			Validations:      []admissionregistrationv1.Validation{validation},
			MatchResources:   &admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)},
		},
	}
	deleteAuditPolicyAfter(t, ap.Name)
	deleteAfter(t, binding, policy)
	counter := &envtestutil.RequestCounter{}
	_, _ = envtestutil.StartOperator(t, counter.Wrap(env.ShippedIdentity(t).Config), auditPolicyOptions())
	bindFirst(t, binding, func() { create(t, policy) })
	create(t, ap)

	const notRead = "params not read: the paramKind is v1 Secret, and celaudit reads Secrets only with --audit-secrets (chart value audit.secrets)"
	expectReport(t, ns, 0, "error cm: "+notRead, "error cm: "+notRead)
	const event = "Warning ParamsNotRead: Params are not read: the paramKind is v1 Secret, and celaudit reads Secrets only with " +
		"--audit-secrets (chart value audit.secrets). Every object a binding with a paramRef matches gets an error result instead of a verdict"
	for _, o := range []struct{ kind, name string }{{"ValidatingAdmissionPolicy", policy.Name}, {"AuditPolicy", ap.Name}} {
		envtestutil.Eventually(t, 30*time.Second, func() error {
			events, err := clusterObjectEvents(context.Background(), o.kind, o.name)
			if err != nil {
				return err
			}
			if !slices.Contains(events, event) {
				return fmt.Errorf("Events on %s %s: %q, want %q among them", o.kind, o.name, events, event)
			}
			return nil
		})
	}
	expectAuditPolicy(t, ap.Name, func(ap *v1alpha1.AuditPolicy) error {
		if s := ap.Status; s.ObservedGeneration != ap.Generation || s.Error != 1 || s.Pass+s.Fail+s.Warn+s.Skip != 0 {
			return fmt.Errorf("status of generation %d: %+v; want one error, no verdict", ap.Generation, s)
		}
		return nil
	})
	for _, verb := range []string{"get", "list", "watch"} {
		if n := counter.Get(verb, "secrets"); n != 0 {
			t.Errorf("celaudit made %d %s requests of secrets without --audit-secrets", n, verb)
		}
	}
}
