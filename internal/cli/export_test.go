package cli

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestExportFromFile checks the pair exported from a file against its golden file and, independently of it,
// against what every registered pair carries as the README lists it: the AuditPolicy's own selectors,
// exclusions and matchConditions first, then the built-in exemptions.
func TestExportFromFile(t *testing.T) {
	out, errOut, code := runPlugin([]string{"export", "auditpolicy", "-f", "testdata/export/auditpolicy.yaml", "team-label"}, "")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkGolden(t, "testdata/export/golden/team-label.yaml", out)

	docs := strings.Split(out, "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%d documents, want 2:\n%s", len(docs), out)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := yaml.UnmarshalStrict([]byte(docs[0]), policy); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), binding); err != nil {
		t.Fatal(err)
	}
	if policy.Name != "celaudit-team-label" || binding.Spec.PolicyName != policy.Name || len(policy.Labels)+len(binding.Labels) != 0 ||
		len(policy.OwnerReferences)+len(binding.OwnerReferences) != 0 {
		t.Errorf("exported pair is misnamed or tied to celaudit: %+v %+v", policy.ObjectMeta, binding.ObjectMeta)
	}
	if got := binding.Spec.ValidationActions; !slices.Equal(got, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("validationActions %v, want [Deny]", got)
	}

	conds := policy.Spec.MatchConditions
	if len(conds) != 2 || conds[0].Name != "not-a-dry-run" || conds[1].Name != "audit.celaudit.io/exempt-identities" {
		t.Fatalf("matchConditions %+v: want the AuditPolicy's, then the exemption of identities", conds)
	}
	for _, name := range []string{`"system:apiserver"`, `"system:kube-controller-manager"`, `"system:kube-scheduler"`, `"system:nodes"`,
		`"system:serviceaccounts:kube-system"`} {
		if !strings.Contains(conds[1].Expression, name) {
			t.Errorf("the exemption of identities does not name %s: %s", name, conds[1].Expression)
		}
	}

	m := binding.Spec.MatchResources
	if m == nil || m.NamespaceSelector == nil {
		t.Fatalf("binding matchResources %+v", m)
	}
	if m.NamespaceSelector.MatchLabels["tier"] != "apps" || len(m.NamespaceSelector.MatchExpressions) != 1 {
		t.Fatalf("namespaceSelector %+v: want the AuditPolicy's labels and one expression", m.NamespaceSelector)
	}
	if e := m.NamespaceSelector.MatchExpressions[0]; e.Key != "kubernetes.io/metadata.name" || e.Operator != metav1.LabelSelectorOpNotIn ||
		!slices.Equal(e.Values, []string{"kube-node-lease", "kube-system"}) {
		t.Errorf("namespace exemption %+v, want kubernetes.io/metadata.name NotIn [kube-node-lease kube-system]", e)
	}
	var excluded []string
	for _, r := range m.ExcludeResourceRules {
		excluded = append(excluded, strings.Join(r.APIGroups, ",")+"/"+strings.Join(r.Resources, ",")+" "+
			strings.Join(r.APIVersions, ",")+" "+strings.Join(opsOf(r.Operations), ","))
	}
	want := []string{
		"apps/deployments/scale v1 UPDATE",
		"/events,events/* * *",
		"audit.celaudit.io/*/* * *",
		"coordination.k8s.io/leases,leases/* * *",
		"events.k8s.io/events,events/* * *",
		"openreports.io/*/* * *",
		"wgpolicyk8s.io/*/* * *",
	}
	if !slices.Equal(excluded, want) {
		t.Errorf("excludeResourceRules\n got %q\nwant %q", excluded, want)
	}
}

func opsOf(ops []admissionregistrationv1.OperationType) []string {
	out := make([]string, len(ops))
	for i, o := range ops {
		out[i] = string(o)
	}
	return out
}
