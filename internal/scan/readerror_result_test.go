package scan_test

import (
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/crdrules"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/internal/vap"
)

// TestReadErrorResultComplete publishes the results about a resource as a whole (the error of a resource that
// cannot be read, the skip of a withheld one), for each kind of policy, and checks that Policy Reporter can
// file them with the policy's other results: a rule name, the policy's category and severity, a resource
// that is not blank (Policy Reporter shows a blank one as an object without kind or name), and the kind of the
// policy, which its name does not tell.
func TestReadErrorResultComplete(t *testing.T) {
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"},
			Scope: apiextensionsv1.NamespaceScoped,
		},
	}
	resolver, err := vap.NewStaticResolver(nil)
	if err != nil {
		t.Fatal(err)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas", Annotations: map[string]string{audit.AnnotationSeverity: "high"}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			Validations: []admissionregistrationv1.Validation{{Expression: "true"}},
		},
	}
	cases := []struct {
		name                       string
		policy                     audit.Policy
		gvr                        schema.GroupVersionResource
		kind                       string
		wantRule                   string
		wantCategory, wantSeverity string
		wantResource               string // apiVersion/kind
		verdict                    audit.Verdict
		message                    string
		wantPolicyKind             string // "" for none
	}{{
		name:         "CRD",
		policy:       crdrules.Compile(crd, crdrules.Options{Category: "Storage", Severity: audit.SeverityLow}),
		gvr:          widgets,
		kind:         "Widget",
		wantRule:     "read (example.com/v1/widgets)",
		wantCategory: "Storage", wantSeverity: audit.SeverityLow,
		wantResource: "example.com/v1/Widget", wantPolicyKind: "CustomResourceDefinition",
		verdict: audit.Error, message: "cannot read example.com/v1/widgets: forbidden",
	}, {
		name:         "ValidatingAdmissionPolicy, kind unknown",
		policy:       vap.CompilePolicy(policy, vap.Options{}).Bind(nil, vap.Deps{Resolver: resolver}),
		gvr:          configMaps,
		wantRule:     "read (v1/configmaps)",
		wantCategory: vap.DefaultCategory, wantSeverity: audit.SeverityHigh,
		wantResource: "v1/", wantPolicyKind: "ValidatingAdmissionPolicy",
		verdict: audit.Error, message: "cannot read v1/configmaps: forbidden",
	}, {
		name:         "policy without category or severity",
		policy:       &keyPolicy{name: "plain", key: "bad"},
		gvr:          configMaps,
		kind:         "ConfigMap",
		wantRule:     "read (v1/configmaps)",
		wantResource: "v1/ConfigMap",
		verdict:      audit.Error, message: "cannot read v1/configmaps: forbidden",
	}, {
		name:         "withheld Secrets, ValidatingAdmissionPolicy",
		policy:       vap.CompilePolicy(policy, vap.Options{}).Bind(nil, vap.Deps{Resolver: resolver}),
		gvr:          schema.GroupVersionResource{Version: "v1", Resource: "secrets"},
		kind:         "Secret",
		wantRule:     "read (v1/secrets)",
		wantCategory: vap.DefaultCategory, wantSeverity: audit.SeverityHigh,
		wantResource: "v1/Secret", wantPolicyKind: "ValidatingAdmissionPolicy",
		verdict: audit.Skip, message: "not audited (v1/secrets): ask for it",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := scan.ResourceResult(c.policy, c.gvr, c.kind, c.verdict, c.message)
			reports := report.BuildCounted([]audit.Result{res}, nil, nil, time.Unix(0, 0), report.Options{})
			if len(reports.ClusterPolicyReports) != 1 || len(reports.ClusterPolicyReports[0].Results) != 1 {
				t.Fatalf("want one cluster report listing the result, got %+v", reports)
			}
			got := reports.ClusterPolicyReports[0].Results[0]
			if len(got.Resources) != 1 {
				t.Fatalf("resources %+v: want one", got.Resources)
			}
			ref := got.Resources[0]
			if ref.APIVersion == "" && ref.Kind == "" && ref.Name == "" {
				t.Errorf("blank resource %+v", ref)
			}
			if r := ref.APIVersion + "/" + ref.Kind; r != c.wantResource {
				t.Errorf("resource %s, want %s", r, c.wantResource)
			}
			if got.Rule != c.wantRule {
				t.Errorf("rule %q, want %q", got.Rule, c.wantRule)
			}
			if got.Category != c.wantCategory || string(got.Severity) != c.wantSeverity {
				t.Errorf("category %q, severity %q; want %q, %q", got.Category, got.Severity, c.wantCategory, c.wantSeverity)
			}
			if kind := got.Properties[audit.PropPolicyKind]; kind != c.wantPolicyKind {
				t.Errorf("policyKind %q, want %q", kind, c.wantPolicyKind)
			}
			if string(got.Result) != string(c.verdict) || got.Message != c.message {
				t.Errorf("result %s %q: want %s %q", got.Result, got.Message, c.verdict, c.message)
			}
		})
	}
}
