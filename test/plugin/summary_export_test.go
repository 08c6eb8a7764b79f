package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/cli"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// run runs kubectl-celaudit with args against the kubeconfig and returns its exit code and output.
func run(t *testing.T, kubeconfig string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	code := cli.Run(streams, append(args, "--kubeconfig", kubeconfig))
	return code, out.String(), errOut.String()
}

func configMap(ns, name string, labels, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: data}
}

func configMapRules() *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
		},
	}}}
}

func inNamespace(ns string) *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{corev1.LabelMetadataName: ns},
	}}
}

// TestSummaryAndExport runs the operator over ConfigMaps judged by a ValidatingAdmissionPolicy and an
// AuditPolicy, then checks that summary counts what the operator found, and that export prints the pair the
// operator registers for the AuditPolicy in Deny.
func TestSummaryAndExport(t *testing.T) {
	env, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigData, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kubeconfigData, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := env.Client
	const ns = "plugin-summary"
	owner := map[string]string{"owner": "x"}
	team := map[string]string{"team": "a"}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		configMap(ns, "good", team, owner),
		configMap(ns, "no-owner", team, nil),
		configMap(ns, "no-team", nil, owner),
		configMap(ns, "neither", nil, nil),
		&admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "plugin-owner"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: configMapRules(),
				Validations:      []admissionregistrationv1.Validation{{Expression: "has(object.data) && 'owner' in object.data", Message: "no owner"}},
			},
		},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "plugin-owner"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: "plugin-owner", MatchResources: inNamespace(ns),
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		},
		&v1alpha1.AuditPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "plugin-team"},
			Spec: v1alpha1.AuditPolicySpec{
				MatchConstraints: configMapRules(),
				MatchResources:   inNamespace(ns),
				Validations:      []admissionregistrationv1.Validation{{Expression: "has(object.metadata.labels) && 'team' in object.metadata.labels", Message: "no team"}},
				Severity:         audit.SeverityHigh,
				Description:      "Every ConfigMap names its team.",
			},
		},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	opts := envtestutil.TestOptions()
	opts.ManageAdmissionPolicies = true
	envtestutil.StartOperator(t, env.Config, opts)

	ap := &v1alpha1.AuditPolicy{}
	envtestutil.Eventually(t, time.Minute, func() error {
		if err := c.Get(ctx, client.ObjectKey{Name: "plugin-team"}, ap); err != nil {
			return err
		}
		if ap.Status.LastAuditTime == nil || ap.Status.Matched != 4 {
			return fmt.Errorf("AuditPolicy status not audited yet: %+v", ap.Status)
		}
		return nil
	})

	f := fixture{kubeconfig: kubeconfig, kubeconfigData: kubeconfigData, env: env, ap: ap}
	t.Run("summary", f.testSummary)
	t.Run("export", f.testExport)
	t.Run("unreachable cluster", f.testUnreachable)
}

// fixture is the cluster TestSummaryAndExport set up.
type fixture struct {
	kubeconfig     string
	kubeconfigData []byte
	env            *envtestutil.Env
	ap             *v1alpha1.AuditPolicy
}

func (f fixture) testSummary(t *testing.T) {
	kubeconfig := f.kubeconfig
	var got cli.SummaryList
	envtestutil.Eventually(t, time.Minute, func() error {
		code, out, errOut := run(t, kubeconfig, "summary", "-o", "json")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, errOut)
		}
		got = cli.SummaryList{}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			return err
		}
		if find(got, audit.SourceVAP, "plugin-owner") == nil || find(got, audit.SourceVAP, "plugin-owner").Fail != 2 {
			return fmt.Errorf("reports not written yet: %s", out)
		}
		return nil
	})
	vap := find(got, audit.SourceVAP, "plugin-owner")
	if vap.Pass != nil || vap.Matched != nil || vap.Warn != 0 || vap.Error != 0 || vap.SafeToEnforce != metav1.ConditionFalse {
		t.Errorf("VAP summary %+v: want 2 fails, unknown passes (reports do not list them), not safe", *vap)
	}
	apSum := find(got, audit.SourceAuditPolicy, "plugin-team")
	want := cli.PolicySummary{Source: audit.SourceAuditPolicy, Policy: "plugin-team", Matched: ptr.To[int64](4), Pass: ptr.To[int64](2), Warn: 2,
		SafeToEnforce: metav1.ConditionFalse, SafeToEnforceReason: "Violations"}
	if apSum == nil || !equality.Semantic.DeepEqual(*apSum, want) {
		t.Errorf("AuditPolicy summary %+v, want %+v", apSum, want)
	}
	// The passes of the VAP (2), of the AuditPolicy (2) and of the AuditPolicy object under its CRD's
	// rules (1) are counted but not listed.
	if got.UnlistedPasses != 5 {
		t.Errorf("unlisted passes %d, want 5", got.UnlistedPasses)
	}
	// The AuditPolicy passes its CRD's rules, but the reports only count passes: whether the CRD's rules judged
	// anything cannot be told from them.
	if crd := find(got, audit.SourceCRD, "auditpolicies.audit.celaudit.io"); crd == nil || crd.Fail+crd.Warn+crd.Error != 0 ||
		crd.SafeToEnforce != metav1.ConditionUnknown || crd.SafeToEnforceReason != cli.SafetyPassesNotListed {
		t.Errorf("the AuditPolicy CRD, whose rules the AuditPolicy passes unlisted, is not listed as unknown: %+v", crd)
	}
	code, table, _ := run(t, kubeconfig, "summary")
	words := strings.Join(strings.Fields(table), " ")
	for _, want := range []string{
		"SOURCE POLICY MATCHED PASS FAIL WARN ERROR SKIP DRIFTED SAFE TO ENFORCE REASON auditpolicy plugin-team 4 2 0 2 0 0 - False Violations " +
			"crd auditpolicies.audit.celaudit.io - - 0 0 0 0 - Unknown PassesNotListed vap plugin-owner - - 2 0 0 0 - False Violations",
		"5 passes are counted but not listed",
	} {
		if code != 0 || !strings.Contains(words, want) {
			t.Errorf("summary table (exit %d) lacks %q:\n%s", code, want, table)
		}
	}
	// In another namespace the policy is listed (it is bound) without the results of this one.
	code, out, _ := run(t, kubeconfig, "summary", "-n", "default", "-o", "json")
	var other cli.SummaryList
	if err := json.Unmarshal([]byte(out), &other); code != 0 || err != nil {
		t.Fatalf("summary -n default: exit %d, %v:\n%s", code, err, out)
	}
	if s := find(other, audit.SourceVAP, "plugin-owner"); s == nil || s.Fail != 0 || s.SafeToEnforce != metav1.ConditionUnknown {
		t.Errorf("summary -n default counted results of another namespace: %+v", s)
	}
}

func (f fixture) testExport(t *testing.T) {
	ctx, c, kubeconfig, ap := context.Background(), f.env.Client, f.kubeconfig, f.ap
	// The AuditPolicy has violations: only an override registers it for Deny.
	ap.Spec.Enforcement = v1alpha1.Deny
	ap.Spec.EnforcementOverride = &v1alpha1.EnforcementOverride{Reason: "the export of a Deny pair is tested"}
	if err := c.Update(ctx, ap); err != nil {
		t.Fatal(err)
	}
	owned := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	ownedBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	envtestutil.Eventually(t, time.Minute, func() error {
		if err := c.Get(ctx, client.ObjectKey{Name: "celaudit-plugin-team"}, ownedBinding); err != nil {
			return err
		}
		return c.Get(ctx, client.ObjectKey{Name: "celaudit-plugin-team"}, owned)
	})
	code, out, errOut := run(t, kubeconfig, "export", "auditpolicy", "plugin-team")
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, errOut)
	}
	docs := strings.Split(out, "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("export printed %d documents, want 2:\n%s", len(docs), out)
	}
	exported := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	exportedBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := yaml.UnmarshalStrict([]byte(docs[0]), exported); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), exportedBinding); err != nil {
		t.Fatal(err)
	}
	if len(exported.OwnerReferences)+len(exported.Labels)+len(exportedBinding.OwnerReferences)+len(exportedBinding.Labels) != 0 {
		t.Errorf("exported pair is tied to the AuditPolicy or to celaudit: %+v %+v", exported.ObjectMeta, exportedBinding.ObjectMeta)
	}
	// The pair as the API server would store it, under a free name, equals the one celaudit registered.
	exported.Name = "exported-plugin-team"
	exportedBinding.Name, exportedBinding.Spec.PolicyName = exported.Name, exported.Name
	dryRun := client.DryRunAll
	if err := c.Create(ctx, exported, dryRun); err != nil {
		t.Fatalf("the API server rejects the exported policy: %v", err)
	}
	if err := c.Create(ctx, exportedBinding, dryRun); err != nil {
		t.Fatalf("the API server rejects the exported binding: %v", err)
	}
	if !equality.Semantic.DeepEqual(exported.Spec, owned.Spec) {
		t.Errorf("exported policy spec\n%+v\nwant the registered one\n%+v", exported.Spec, owned.Spec)
	}
	exportedBinding.Spec.PolicyName = owned.Name
	if !equality.Semantic.DeepEqual(exportedBinding.Spec, ownedBinding.Spec) {
		t.Errorf("exported binding spec\n%+v\nwant the registered one\n%+v", exportedBinding.Spec, ownedBinding.Spec)
	}
	if exported.Annotations[audit.AnnotationSeverity] != audit.SeverityHigh {
		t.Errorf("exported annotations %v lack the severity", exported.Annotations)
	}

	if code, _, errOut := run(t, kubeconfig, "export", "auditpolicy", "missing"); code != 2 || !strings.Contains(errOut, `auditpolicy "missing" not found`) {
		t.Errorf("export of a missing AuditPolicy: exit %d, %q", code, errOut)
	}
}

func (f fixture) testUnreachable(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "kubeconfig")
	data := regexp.MustCompile(`server: .*`).ReplaceAllString(string(f.kubeconfigData), "server: https://127.0.0.1:1")
	if err := os.WriteFile(bad, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"summary"}, {"export", "auditpolicy", "plugin-team"}} {
		if code, _, errOut := run(t, bad, append(args, "--request-timeout", "5s")...); code != 3 || !strings.Contains(errOut, "connection refused") {
			t.Errorf("%v on an unreachable cluster: exit %d, %q; want 3 and the reason", args, code, errOut)
		}
	}
}

func find(l cli.SummaryList, source audit.PolicySource, name string) *cli.PolicySummary {
	for i := range l.Policies {
		if l.Policies[i].Source == source && l.Policies[i].Policy == name {
			return &l.Policies[i]
		}
	}
	return nil
}
