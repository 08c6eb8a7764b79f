package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/cli"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// gadgets is the name of both the CRD and the ValidatingAdmissionPolicy of TestSummaryReportAPIs: a policy
// name with dots says nothing of its kind.
const (
	gadgets     = "gadgets.apis.example.com"
	apisGroup   = "apis.example.com"
	apisNS      = "summary-apis"
	apisVersion = "v1"
)

// gadgetsCRD returns the CRD of Gadgets; tightened, it requires an even number of replicas.
func gadgetsCRD(tightened bool) *apiextensionsv1.CustomResourceDefinition {
	spec := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"replicas": {Type: "integer"}}}
	if tightened {
		spec.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.replicas % 2 == 0", Message: "replicas must be even"}}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: gadgets},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: apisGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Gadget", ListKind: "GadgetList", Plural: "gadgets", Singular: "gadget"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: apisVersion, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec},
				}},
			}},
		},
	}
}

// gadgetsPolicy, named as the CRD, requires an owner label on the ConfigMaps of apisNS.
func gadgetsPolicy() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: gadgets},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: configMapRules(),
				Validations: []admissionregistrationv1.Validation{{
					Expression: "has(object.metadata.labels) && 'owner' in object.metadata.labels", Message: "no owner",
				}},
			},
		}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: gadgets},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: gadgets, MatchResources: inNamespace(apisNS),
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		}
}

// TestSummaryReportAPIs runs the operator, as its shipped ServiceAccount, with each --report-api in turn over
// a CRD and a ValidatingAdmissionPolicy of the same dotted name, each judging one passing and one failing
// object, and checks that summary gives the same counts, written by hand, whichever API holds the reports.
func TestSummaryReportAPIs(t *testing.T) {
	ctx := context.Background()
	env := envtestutil.StartForTest(t)
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(envtestutil.RepoRoot(), "config", "openreports")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatalf("installing the OpenReports CRDs: %v", err)
	}
	id := env.ShippedIdentity(t)
	kubeconfig := env.KubeconfigFile(t)
	c := env.Client
	policy, binding := gadgetsPolicy()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: apisNS}},
		configMap(apisNS, "owned", map[string]string{"owner": "a"}, nil),
		configMap(apisNS, "unowned", nil, nil),
		gadgetsCRD(false), policy, binding,
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	if err := envtestutil.WaitEstablished(ctx, c, gadgets); err != nil {
		t.Fatal(err)
	}
	for _, replicas := range []int64{2, 3} {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": apisGroup + "/" + apisVersion, "kind": "Gadget",
			"metadata": map[string]any{"namespace": apisNS, "name": fmt.Sprintf("replicas-%d", replicas)},
			"spec":     map[string]any{"replicas": replicas},
		}}
		envtestutil.Eventually(t, time.Minute, func() error { return c.Create(ctx, obj.DeepCopy()) })
	}
	// Tightened once the objects are stored, as a rollout does.
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: gadgets}, crd); err != nil {
		t.Fatal(err)
	}
	crd.Spec.Versions = gadgetsCRD(true).Spec.Versions
	if err := c.Update(ctx, crd); err != nil {
		t.Fatal(err)
	}

	want := []cli.PolicySummary{
		{Source: audit.SourceCRD, Policy: gadgets, Matched: ptr.To[int64](2), Pass: ptr.To[int64](1), Fail: 1,
			SafeToEnforce: metav1.ConditionFalse, SafeToEnforceReason: results.SafetyViolations},
		{Source: audit.SourceVAP, Policy: gadgets, Matched: ptr.To[int64](2), Pass: ptr.To[int64](1), Fail: 1,
			SafeToEnforce: metav1.ConditionFalse, SafeToEnforceReason: results.SafetyViolations},
	}
	var first *cli.SummaryList
	for _, api := range []string{controllers.ReportAPIWGPolicy, controllers.ReportAPIOpenReports, controllers.ReportAPIBoth} {
		t.Run(api, func(t *testing.T) {
			opts := envtestutil.TestOptions()
			opts.ReportAPI = api
			// Passes listed, for exact matched counts, in chunks of two results: a namespace's results span
			// several reports.
			opts.ReportVerdicts = "pass,fail,warn,error,skip"
			opts.MaxResultsPerReport = 2
			_, stop := envtestutil.StartOperator(t, id.Config, opts)
			var got cli.SummaryList
			envtestutil.Eventually(t, time.Minute, func() error {
				code, out, errOut := run(t, kubeconfig, "summary", "-o", "json")
				if code != 0 {
					return fmt.Errorf("summary: exit %d: %s", code, errOut)
				}
				got = cli.SummaryList{}
				if err := json.Unmarshal([]byte(out), &got); err != nil {
					return err
				}
				for _, w := range want {
					if s := find(got, w.Source, w.Policy); s == nil || !equality.Semantic.DeepEqual(*s, w) {
						have, _ := json.Marshal(s)
						wanted, _ := json.Marshal(w)
						return fmt.Errorf("%s/%s: %s, want %s", w.Source, w.Policy, have, wanted)
					}
				}
				return nil
			})
			stop()
			if got.Unattributed != 0 || got.UnlistedPasses != 0 {
				t.Errorf("summary %+v: want every result attributed and every pass listed", got)
			}
			wg, or := reportsIn(t, env)
			if wantWG, wantOR := api != controllers.ReportAPIOpenReports, api != controllers.ReportAPIWGPolicy; (wg > 0) != wantWG || (or > 0) != wantOR {
				t.Fatalf("--report-api=%s wrote %d PolicyReports and %d Reports in %s", api, wg, or, apisNS)
			}
			if first == nil {
				first = &got
			} else if !equality.Semantic.DeepEqual(got, *first) {
				t.Errorf("summary with --report-api=%s:\n%+v\nwant the same as with %s:\n%+v", api, got, controllers.ReportAPIWGPolicy, *first)
			}
			deleteReports(t, env)
		})
	}
}

// reportsIn counts celaudit's reports of apisNS in each API.
func reportsIn(t *testing.T, env *envtestutil.Env) (policyReports, reports int) {
	t.Helper()
	sel := client.MatchingLabels{report.ManagedByLabel: report.ManagedByValue}
	var prs v1alpha2.PolicyReportList
	var rs openreportsv1alpha1.ReportList
	if err := env.Client.List(context.Background(), &prs, sel, client.InNamespace(apisNS)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.List(context.Background(), &rs, sel, client.InNamespace(apisNS)); err != nil {
		t.Fatal(err)
	}
	return len(prs.Items), len(rs.Items)
}

// deleteReports deletes celaudit's reports in both APIs, so that the next operator starts from none.
func deleteReports(t *testing.T, env *envtestutil.Env) {
	t.Helper()
	ctx := context.Background()
	sel := client.MatchingLabels{report.ManagedByLabel: report.ManagedByValue}
	var namespaces corev1.NamespaceList
	if err := env.Client.List(ctx, &namespaces); err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces.Items {
		for _, o := range []client.Object{&v1alpha2.PolicyReport{}, &openreportsv1alpha1.Report{}} {
			if err := env.Client.DeleteAllOf(ctx, o, sel, client.InNamespace(ns.Name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, o := range []client.Object{&v1alpha2.ClusterPolicyReport{}, &openreportsv1alpha1.ClusterReport{}} {
		if err := env.Client.DeleteAllOf(ctx, o, sel); err != nil {
			t.Fatal(err)
		}
	}
}
