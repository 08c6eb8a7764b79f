package report

import (
	"encoding/json"
	"strings"
	"testing"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/internal/audit"
)

// openReportsFixture returns chunked namespaced and cluster reports with every result field set.
func openReportsFixture() Reports {
	var results []audit.Result
	for i := range 20 {
		name := "w" + strings.Repeat("x", i)
		results = append(results, newResult(withObject("team-a", name), withVerdict(audit.Fail), withMessage("too many replicas")))
		results = append(results, newResult(withObject("", name), withVerdict(audit.Warn)))
	}
	built := BuildCounted(results, nil, nil, scanTime(), Options{MaxResultsPerReport: 8})
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
	built.PolicyReports[0].Results[0].ResourceSelector = sel
	built.PolicyReports[0].Results[0].Scored = true
	built.PolicyReports[0].Scope = &corev1.ObjectReference{Kind: "Namespace", Name: "team-a"}
	built.ClusterPolicyReports[0].ScopeSelector = sel
	return built
}

// Converting to OpenReports and back gives the reports back, field for field.
func TestOpenReportsRoundTrip(t *testing.T) {
	want := openReportsFixture()
	if len(want.PolicyReports) < 2 || len(want.ClusterPolicyReports) < 2 {
		t.Fatalf("fixture not chunked: %d namespaced, %d cluster reports", len(want.PolicyReports), len(want.ClusterPolicyReports))
	}
	got := FromOpenReports(ToOpenReports(openReportsFixture()))
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("round trip changed the reports:\n got %+v\nwant %+v", got.PolicyReports[0].Results[0], want.PolicyReports[0].Results[0])
	}
	// And the other way round, from a report as the API server returns it.
	or := ToOpenReports(openReportsFixture())
	or.Reports[0].TypeMeta = metav1.TypeMeta{APIVersion: "openreports.io/v1alpha1", Kind: "Report"}
	back := ToOpenReports(FromOpenReports(or))
	if !equality.Semantic.DeepEqual(back, or) {
		t.Fatal("OpenReports -> wgpolicy -> OpenReports changed the reports")
	}
	if back.Reports[0].Kind != "Report" || FromOpenReports(or).PolicyReports[0].Kind != "PolicyReport" {
		t.Errorf("kinds: %q, %q", back.Reports[0].Kind, FromOpenReports(or).PolicyReports[0].Kind)
	}
}

// The JSON of a converted report is the PolicyReport's, result for result: OpenReports' Go fields Description
// and Subjects are the JSON message and resources, and the report has celaudit as its top-level source.
func TestOpenReportsJSON(t *testing.T) {
	in := openReportsFixture()
	p := in.PolicyReports[0]
	r := ToReport(&p)
	if r.Source != "celaudit" {
		t.Errorf("top-level source = %q, want celaudit", r.Source)
	}
	res := r.Results[0]
	if res.Description != p.Results[0].Message || res.Description == "" {
		t.Errorf("Description = %q, want the message %q", res.Description, p.Results[0].Message)
	}
	if len(res.Subjects) != 1 || res.Subjects[0] != p.Results[0].Resources[0] {
		t.Errorf("Subjects = %v, want the resources %v", res.Subjects, p.Results[0].Resources)
	}
	type results struct {
		Source  string            `json:"source"`
		Summary json.RawMessage   `json:"summary"`
		Results []json.RawMessage `json:"results"`
	}
	var fromWG, fromOR results
	mustRoundJSON(t, p, &fromWG)
	mustRoundJSON(t, r, &fromOR)
	if fromOR.Source != "celaudit" {
		t.Errorf("JSON source = %q", fromOR.Source)
	}
	if string(fromWG.Summary) != string(fromOR.Summary) || len(fromWG.Results) != len(fromOR.Results) {
		t.Fatalf("summary %s vs %s, %d vs %d results", fromWG.Summary, fromOR.Summary, len(fromWG.Results), len(fromOR.Results))
	}
	for i := range fromWG.Results {
		if string(fromWG.Results[i]) != string(fromOR.Results[i]) {
			t.Errorf("result %d:\nPolicyReport %s\nReport       %s", i, fromWG.Results[i], fromOR.Results[i])
		}
	}
	if !strings.Contains(string(fromOR.Results[0]), `"message":"`) || !strings.Contains(string(fromOR.Results[0]), `"resources":[`) {
		t.Errorf("result JSON lacks message or resources: %s", fromOR.Results[0])
	}
}

func mustRoundJSON(t *testing.T, v, into any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, into); err != nil {
		t.Fatal(err)
	}
}

// A Report compacted by the cache is compared by digest, as a PolicyReport is: unchanged content writes
// nothing, changed content or a source that is not celaudit's is written again.
func TestOpenReportsCachedDiff(t *testing.T) {
	desired := func() Reports { return openReportsFixture() }
	existing := func(edit func(*openreportsv1alpha1.Report)) Reports {
		or := ToOpenReports(stored(openReportsFixture()))
		for i := range or.Reports {
			if i == 0 && edit != nil {
				edit(&or.Reports[i])
			}
			c, err := ForCache(&or.Reports[i])
			if err != nil {
				t.Fatal(err)
			}
			if len(c.(*openreportsv1alpha1.Report).Results) != 0 {
				t.Fatal("the cache keeps a Report's results")
			}
		}
		for i := range or.ClusterReports {
			if _, err := ForCache(&or.ClusterReports[i]); err != nil {
				t.Fatal(err)
			}
		}
		return FromOpenReports(or)
	}
	if c := Diff(desired(), existing(nil)); !c.Empty() {
		t.Fatalf("unchanged cached Reports are written: %d updates", len(c.PolicyReports.Update)+len(c.ClusterPolicyReports.Update))
	}
	if got, want := PreviousTimestamps(existing(nil)), PreviousTimestamps(desired()); len(got) != len(want) || len(got) == 0 {
		t.Errorf("timestamps of cached Reports: %d, of the built ones: %d", len(got), len(want))
	}
	edited := existing(func(r *openreportsv1alpha1.Report) { r.Results[0].Description = "edited" })
	if c := Diff(desired(), edited); len(c.PolicyReports.Update) != 1 {
		t.Errorf("an edited message: %d updates, want 1", len(c.PolicyReports.Update))
	}
	foreignSource := existing(func(r *openreportsv1alpha1.Report) { r.Source = "someone" })
	if c := Diff(desired(), foreignSource); len(c.PolicyReports.Update) != 1 {
		t.Errorf("a report whose source is not celaudit: %d updates, want 1", len(c.PolicyReports.Update))
	}
}
