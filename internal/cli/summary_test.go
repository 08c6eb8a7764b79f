package cli

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/report"
)

// result builds a listed report result about an object of policy with the given verdict and properties (key,
// value pairs).
func result(policy string, v audit.Verdict, props ...string) v1alpha2.PolicyReportResult {
	r := wholeResource(policy, v, props...)
	r.Resources = []corev1.ObjectReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "c", UID: "uid-c"}}
	return r
}

// wholeResource builds a listed report result about no object (a resource that cannot be read).
func wholeResource(policy string, v audit.Verdict, props ...string) v1alpha2.PolicyReportResult {
	r := v1alpha2.PolicyReportResult{Policy: policy, Result: v1alpha2.PolicyResult(v), Properties: map[string]string{}}
	for i := 0; i+1 < len(props); i += 2 {
		r.Properties[props[i]] = props[i+1]
	}
	return r
}

func policyReport(ns string, pass int, results ...v1alpha2.PolicyReportResult) v1alpha2.PolicyReport {
	r := v1alpha2.PolicyReport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: report.ChunkName(0)}, Results: results}
	r.Summary.Pass = pass
	for _, res := range results {
		switch res.Result {
		case v1alpha2.StatusFail:
			r.Summary.Fail++
		case v1alpha2.StatusWarn:
			r.Summary.Warn++
		case v1alpha2.StatusError:
			r.Summary.Error++
		case v1alpha2.StatusSkip:
			r.Summary.Skip++
		}
	}
	return r
}

func TestSummarize(t *testing.T) {
	kind := audit.PropPolicyKind
	// id gives each result a resultID of its own, as the operator's reports do.
	n := 0
	id := func(r v1alpha2.PolicyReportResult) v1alpha2.PolicyReportResult {
		n++
		r.Properties[audit.PropResultID] = strconv.Itoa(n)
		return r
	}
	crd := func(v audit.Verdict) v1alpha2.PolicyReportResult {
		return id(result("widgets.example.com", v, kind, "CustomResourceDefinition", audit.PropCRDVersion, "v1"))
	}
	vap := func(v audit.Verdict) v1alpha2.PolicyReportResult {
		return id(result("owner", v, kind, "ValidatingAdmissionPolicy", audit.PropBinding, "owner"))
	}
	ap := func(v audit.Verdict) v1alpha2.PolicyReportResult {
		return id(result("team", v, kind, "AuditPolicy", audit.PropBinding, "celaudit-team"))
	}
	mapResult := func(policy string, v audit.Verdict) v1alpha2.PolicyReportResult {
		return id(result(policy, v, kind, "MutatingAdmissionPolicy", audit.PropOperation, "UPDATE"))
	}
	audited := v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team", Generation: 2}, Status: v1alpha1.AuditPolicyStatus{
		Matched: 7, Pass: 5, Warn: 2, LastAuditTime: &metav1.Time{Time: time.Unix(1, 0)},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionSafeToEnforce, Status: metav1.ConditionFalse, Reason: "Violations", ObservedGeneration: 2}},
	}}
	edited := v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: "edited", Generation: 3}, Status: v1alpha1.AuditPolicyStatus{
		Matched: 7, Pass: 7, Conditions: []metav1.Condition{{Type: v1alpha1.ConditionSafeToEnforce, Status: metav1.ConditionTrue, Reason: "NoViolations", ObservedGeneration: 2}},
	}}
	// listed are reports that list their passes: 2 CRD results (a pass and a fail), 5 of the VAP.
	listed := report.Reports{
		PolicyReports: []v1alpha2.PolicyReport{
			policyReport("a", 3, crd(audit.Pass), crd(audit.Fail), vap(audit.Pass), vap(audit.Pass), vap(audit.Skip)),
			policyReport("b", 1, vap(audit.Pass), vap(audit.Error)),
		},
		ClusterPolicyReports: []v1alpha2.ClusterPolicyReport{{Summary: v1alpha2.PolicyReportSummary{Pass: 1},
			Results: []v1alpha2.PolicyReportResult{crd(audit.Pass)}}},
	}
	listedWant := SummaryList{Policies: []PolicySummary{
		{Source: audit.SourceCRD, Policy: "widgets.example.com", Matched: ptr.To[int64](3), Pass: ptr.To[int64](2), Fail: 1,
			SafeToEnforce: "False", SafeToEnforceReason: "Violations"},
		{Source: audit.SourceVAP, Policy: "owner", Matched: ptr.To[int64](5), Pass: ptr.To[int64](3), Error: 1, Skip: 1,
			SafeToEnforce: "False", SafeToEnforceReason: "Violations"},
		{Source: audit.SourceVAP, Policy: "quiet", Matched: ptr.To[int64](0), Pass: ptr.To[int64](0),
			SafeToEnforce: "Unknown", SafeToEnforceReason: "NothingJudged"},
	}}
	// counted are reports of namespace a that count 9 passes without listing them.
	counted := report.Reports{PolicyReports: []v1alpha2.PolicyReport{policyReport("a", 9, vap(audit.Warn), ap(audit.Warn), ap(audit.Warn))}}
	countedIn := func(apis ...report.Reports) summaryInputs {
		return summaryInputs{
			reports:       apis,
			auditPolicies: []v1alpha1.AuditPolicy{audited, edited, {ObjectMeta: metav1.ObjectMeta{Name: "new"}}},
			policies:      []audit.PolicyKey{audit.VAPKey("quiet")},
		}
	}
	countedWant := SummaryList{UnlistedPasses: 9, Policies: []PolicySummary{
		{Source: audit.SourceAuditPolicy, Policy: "edited", Matched: ptr.To[int64](7), Pass: ptr.To[int64](7), SafeToEnforce: "Unknown", SafeToEnforceReason: "AuditPending"},
		{Source: audit.SourceAuditPolicy, Policy: "new", Matched: ptr.To[int64](0), Pass: ptr.To[int64](0), SafeToEnforce: "Unknown", SafeToEnforceReason: "AuditPending"},
		{Source: audit.SourceAuditPolicy, Policy: "team", Matched: ptr.To[int64](7), Pass: ptr.To[int64](5), Warn: 2, SafeToEnforce: "False", SafeToEnforceReason: "Violations"},
		{Source: audit.SourceVAP, Policy: "owner", Warn: 1, SafeToEnforce: "False", SafeToEnforceReason: "Violations"},
		{Source: audit.SourceVAP, Policy: "quiet", SafeToEnforce: "Unknown", SafeToEnforceReason: "PassesNotListed"},
	}}
	for _, tc := range []struct {
		name string
		in   summaryInputs
		want SummaryList
	}{
		{
			name: "passes listed: exact counts per source",
			in:   summaryInputs{reports: []report.Reports{listed}, policies: []audit.PolicyKey{audit.VAPKey("quiet")}},
			want: listedWant,
		},
		{
			name: "both report APIs list the same results: each counts once",
			in:   summaryInputs{reports: []report.Reports{listed, listed}, policies: []audit.PolicyKey{audit.VAPKey("quiet")}},
			want: listedWant,
		},
		{
			name: "passes listed: judged and clean, unless it covers subresources",
			in: summaryInputs{reports: []report.Reports{{
				PolicyReports: []v1alpha2.PolicyReport{policyReport("a", 2, vap(audit.Pass),
					id(result("scale", audit.Pass, kind, "ValidatingAdmissionPolicy", audit.PropBinding, "scale")))},
			}}, subresources: map[audit.PolicyKey][]string{audit.VAPKey("scale"): {"deployments/scale"}}},
			want: SummaryList{Policies: []PolicySummary{
				{Source: audit.SourceVAP, Policy: "owner", Matched: ptr.To[int64](1), Pass: ptr.To[int64](1), SafeToEnforce: "True", SafeToEnforceReason: "NoViolations"},
				{Source: audit.SourceVAP, Policy: "scale", Matched: ptr.To[int64](1), Pass: ptr.To[int64](1), SafeToEnforce: "Unknown", SafeToEnforceReason: "Subresources"},
			}},
		},
		{
			name: "passes counted only: unknown passes, AuditPolicies from their status",
			in:   countedIn(counted),
			want: countedWant,
		},
		{
			name: "both report APIs count the same passes: counted once",
			in:   countedIn(counted, counted),
			want: countedWant,
		},
		{
			name: "each report API holds other namespaces",
			in: summaryInputs{reports: []report.Reports{
				{PolicyReports: []v1alpha2.PolicyReport{policyReport("a", 0, vap(audit.Fail))}},
				{PolicyReports: []v1alpha2.PolicyReport{policyReport("b", 2, vap(audit.Fail))}},
			}},
			want: SummaryList{UnlistedPasses: 2, Policies: []PolicySummary{
				{Source: audit.SourceVAP, Policy: "owner", Fail: 2, SafeToEnforce: "False", SafeToEnforceReason: "Violations"},
			}},
		},
		{
			// Without its AuditPolicy (deleted since), a pair's results are still the AuditPolicy's: they name its
			// kind. A result about a whole resource (one that cannot be read) judges no object: without a
			// violation, its policy's safety is unknown.
			name: "results of a deleted AuditPolicy, and about a whole resource",
			in: summaryInputs{reports: []report.Reports{{PolicyReports: []v1alpha2.PolicyReport{policyReport("a", 0,
				ap(audit.Fail),
				id(wholeResource("cannot-read", audit.Error, kind, "ValidatingAdmissionPolicy")),
				id(wholeResource("gadgets.example.com", audit.Error, kind, "CustomResourceDefinition")),
			)}}}},
			want: SummaryList{Policies: []PolicySummary{
				{Source: audit.SourceAuditPolicy, Policy: "team", Matched: ptr.To[int64](1), Pass: ptr.To[int64](0), Fail: 1,
					SafeToEnforce: "False", SafeToEnforceReason: "Violations"},
				{Source: audit.SourceCRD, Policy: "gadgets.example.com", Matched: ptr.To[int64](1), Pass: ptr.To[int64](0), Error: 1,
					SafeToEnforce: "Unknown", SafeToEnforceReason: "ResourcesNotJudged"},
				{Source: audit.SourceVAP, Policy: "cannot-read", Matched: ptr.To[int64](1), Pass: ptr.To[int64](0), Error: 1,
					SafeToEnforce: "Unknown", SafeToEnforceReason: "ResourcesNotJudged"},
			}},
		},
		{
			// One result per (MutatingAdmissionPolicy, object): its warnings are the objects it would change.
			// It refuses nothing: safe to enforce means nothing for it, and is left empty.
			name: "mutating admission policies: drifted objects, no safety",
			in: summaryInputs{reports: []report.Reports{{PolicyReports: []v1alpha2.PolicyReport{
				policyReport("a", 0, mapResult("team-label", audit.Warn), mapResult("team-label", audit.Pass), mapResult("limits", audit.Error)),
				policyReport("b", 0, mapResult("team-label", audit.Warn)),
			}}}, policies: []audit.PolicyKey{audit.MAPKey("quiet")}},
			want: SummaryList{Policies: []PolicySummary{
				{Source: audit.SourceMAP, Policy: "limits", Matched: ptr.To[int64](1), Pass: ptr.To[int64](0), Error: 1, Drifted: ptr.To[int64](0)},
				{Source: audit.SourceMAP, Policy: "quiet", Matched: ptr.To[int64](0), Pass: ptr.To[int64](0), Drifted: ptr.To[int64](0)},
				{Source: audit.SourceMAP, Policy: "team-label", Matched: ptr.To[int64](3), Pass: ptr.To[int64](1), Warn: 2, Drifted: ptr.To[int64](2)},
			}},
		},
		{
			name: "the kind a result names, not its name or other properties",
			in: summaryInputs{reports: []report.Reports{{PolicyReports: []v1alpha2.PolicyReport{policyReport("a", 0,
				id(result("widgets.example.com", audit.Fail, kind, "ValidatingAdmissionPolicy", audit.PropBinding, "widgets.example.com")),
				id(result("widgets.example.com", audit.Error, kind, "CustomResourceDefinition")),
				// A deleted AuditPolicy's results are still the AuditPolicy's, though its pair's binding is named
				// like a VAP's.
				ap(audit.Fail),
				// Written by an earlier celaudit.
				id(result("gadgets.example.com", audit.Fail, audit.PropCRDVersion, "v1")),
				id(wholeResource("cannot-read", audit.Error)),
			)}}}},
			want: SummaryList{Unattributed: 2, Policies: []PolicySummary{
				{Source: audit.SourceAuditPolicy, Policy: "team", Matched: ptr.To[int64](1), Pass: ptr.To[int64](0), Fail: 1,
					SafeToEnforce: "False", SafeToEnforceReason: "Violations"},
				{Source: audit.SourceCRD, Policy: "widgets.example.com", Matched: ptr.To[int64](1), Pass: ptr.To[int64](0), Error: 1,
					SafeToEnforce: "False", SafeToEnforceReason: "Violations"},
				{Source: audit.SourceVAP, Policy: "widgets.example.com", Matched: ptr.To[int64](1), Pass: ptr.To[int64](0), Fail: 1,
					SafeToEnforce: "False", SafeToEnforceReason: "Violations"},
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := summarize(tc.in)
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("summarize:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestSummaryTable(t *testing.T) {
	var buf bytes.Buffer
	err := printSummaryTable(&buf, SummaryList{UnlistedPasses: 3, Unattributed: 2, Policies: []PolicySummary{
		{Source: audit.SourceCRD, Policy: "widgets.example.com", Matched: ptr.To[int64](3), Pass: ptr.To[int64](2), Fail: 1, SafeToEnforce: "False", SafeToEnforceReason: "Violations"},
		{Source: audit.SourceVAP, Policy: "owner", SafeToEnforce: "Unknown", SafeToEnforceReason: "PassesNotListed"},
		{Source: audit.SourceMAP, Policy: "team-label", Warn: 4, Drifted: ptr.To[int64](4)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := `SOURCE   POLICY                MATCHED   PASS   FAIL   WARN   ERROR   SKIP   DRIFTED   SAFE TO ENFORCE   REASON
crd      widgets.example.com   3         2      1      0      0       0      -         False             Violations
vap      owner                 -         -      0      0      0       0      -         Unknown           PassesNotListed
map      team-label            -         -      0      4      0       0      4         -                 -

3 passes are counted but not listed in the reports, so they cannot be told apart by policy; list them with the operator's --report-results=pass,fail,warn,error,skip.

2 listed results do not name the kind of their policy (policyKind): an earlier celaudit wrote them, and they are counted once the operator has rewritten its reports.
`
	if buf.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", buf.String(), want)
	}
}

// TestSummaryJSONLeavesOutMAPSafety checks that -o json has no safeToEnforce for a MutatingAdmissionPolicy
// (its warnings are drift, not objects it would refuse) and keeps it for the other policies.
func TestSummaryJSONLeavesOutMAPSafety(t *testing.T) {
	var buf bytes.Buffer
	err := printJSON(&buf, SummaryList{Policies: []PolicySummary{
		{Source: audit.SourceVAP, Policy: "owner", Matched: ptr.To[int64](1), Pass: ptr.To[int64](1), SafeToEnforce: "True", SafeToEnforceReason: "NoViolations"},
		{Source: audit.SourceMAP, Policy: "team-label", Matched: ptr.To[int64](2), Pass: ptr.To[int64](0), Warn: 2, Drifted: ptr.To[int64](2)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Policies []map[string]any `json:"policies"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v in %s", err, buf.String())
	}
	if len(got.Policies) != 2 {
		t.Fatalf("policies %v, want 2", got.Policies)
	}
	if v, ok := got.Policies[0]["safeToEnforce"]; !ok || v != "True" {
		t.Errorf("vap owner: safeToEnforce %v (present %t), want True", v, ok)
	}
	for _, field := range []string{"safeToEnforce", "safeToEnforceReason"} {
		if v, ok := got.Policies[1][field]; ok {
			t.Errorf("map team-label: %s = %v, want none", field, v)
		}
	}
}
