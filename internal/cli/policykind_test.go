package cli

import (
	"encoding/json"
	"testing"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

// TestCheckPolicyKind checks the property policyKind of every result check lists against the kinds of the
// fixture's rules, written by hand: the golden reports.json holds the same.
func TestCheckPolicyKind(t *testing.T) {
	want := map[string]string{
		"widgets.check.example.com": "CustomResourceDefinition",
		"replica-limit":             "ValidatingAdmissionPolicy",
		"rolling-updates":           "ValidatingAdmissionPolicy",
	}
	out, errOut, code := runCheck("", "-f", checkManifests, "--rules", checkRules, "-o", OutputJSON, "--results", "all")
	if code != ExitViolations {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, ExitViolations, errOut)
	}
	var list struct {
		Items []v1alpha2.PolicyReport `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range list.Items {
		for _, res := range r.Results {
			seen[res.Policy] = true
			if got := res.Properties[audit.PropPolicyKind]; got != want[res.Policy] {
				t.Errorf("%s result of %s on %v: policyKind %q, want %q", res.Result, res.Policy, res.Resources, got, want[res.Policy])
			}
		}
	}
	if len(seen) != len(want) {
		t.Errorf("results of %v, want results of each of %v", seen, want)
	}
}
