package report

import (
	"testing"

	"github.com/celaudit/celaudit/internal/audit"
)

func withSource(s audit.PolicySource) resultOption {
	return func(r *audit.Result) { r.PolicySource = s }
}

// TestPublishedPolicyKind checks that each listed result names the kind of its policy's source, whatever
// its name and other properties say, and keeps the ID it had before the property existed.
func TestPublishedPolicyKind(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result audit.Result
		want   string // "" for no property
	}{
		{name: "a CRD's result", result: newResult(withSource(audit.SourceCRD)), want: "CustomResourceDefinition"},
		{
			name:   "a ValidatingAdmissionPolicy named like a CRD, with a crdVersion",
			result: newResult(withSource(audit.SourceVAP)),
			want:   "ValidatingAdmissionPolicy",
		},
		{name: "an AuditPolicy's result", result: newResult(withSource(audit.SourceAuditPolicy), withPolicy("team")), want: "AuditPolicy"},
		{name: "no source, no property", result: newResult(), want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withoutSource := tc.result
			withoutSource.PolicySource = ""
			reports := BuildCounted([]audit.Result{tc.result}, nil, nil, scanTime(), Options{})
			results := allResults(reports)
			if len(results) != 1 || len(results[0]) != 1 {
				t.Fatalf("reports %+v: want one listed result", reports)
			}
			props := results[0][0].Properties
			if got, ok := props[audit.PropPolicyKind]; got != tc.want || ok != (tc.want != "") {
				t.Errorf("policyKind %q (present: %t), want %q", got, ok, tc.want)
			}
			if props[audit.PropResultID] != withoutSource.ID() {
				t.Errorf("resultID %s, want %s: the ID of the result without its source", props[audit.PropResultID], withoutSource.ID())
			}
		})
	}
}
