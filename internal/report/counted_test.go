package report

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/celaudit/celaudit/internal/audit"
)

func TestBuildCounted(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	fail := audit.Result{Policy: "p", Verdict: audit.Fail, Message: "bad",
		Resource: audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "x", UID: "u"}}
	pass := fail
	pass.Verdict, pass.Message, pass.Resource.Name, pass.Resource.UID = audit.Pass, "", "y", "v"

	got := BuildCounted([]audit.Result{fail}, CountedPasses{"a": {"u1": 1, "u2": 2}, "b": {"u3": 2}, "": {"u4": 1}, "c": {"u5": 0}}, nil, now, Options{})
	if len(got.PolicyReports) != 2 || len(got.ClusterPolicyReports) != 1 {
		t.Fatalf("got %d namespaced and %d cluster reports, want 2 and 1", len(got.PolicyReports), len(got.ClusterPolicyReports))
	}
	a, b := got.PolicyReports[0], got.PolicyReports[1]
	if a.Namespace != "a" || a.Summary.Pass != 3 || a.Summary.Fail != 1 || len(a.Results) != 1 {
		t.Errorf("namespace a: %s %+v with %d results", a.Namespace, a.Summary, len(a.Results))
	}
	if b.Namespace != "b" || b.Name != ChunkName(0) || b.Summary.Pass != 2 || len(b.Results) != 0 || !IsManaged(&b) {
		t.Errorf("namespace b: %s/%s %+v with %d results", b.Namespace, b.Name, b.Summary, len(b.Results))
	}
	if c := got.ClusterPolicyReports[0]; c.Summary.Pass != 1 {
		t.Errorf("cluster report summary %+v", c.Summary)
	}

	// Counted passes give the same reports as the same passes listed out, when passes are not listed and
	// the namespace fits one report.
	pass2 := pass
	pass2.Resource.Name, pass2.Resource.UID = "z", "w"
	listed := BuildCounted([]audit.Result{fail, pass, pass2}, nil, nil, now, Options{})
	counted := BuildCounted([]audit.Result{fail}, CountedPasses{"a": {"v": 1, "w": 1}}, nil, now, Options{})
	if !equality.Semantic.DeepEqual(listed, counted) {
		t.Errorf("counted passes differ from listed ones:\n%+v\n%+v", listed, counted)
	}
}

// In a split namespace, an object's counted passes are summed in the report that lists its other results.
func TestBuildCountedFollowsTheObject(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var results []audit.Result
	passes := CountedPasses{"a": {}}
	for i := range 100 {
		r := newResult(withObject("a", fmt.Sprintf("o-%03d", i)), withVerdict(audit.Fail))
		results = append(results, r)
		passes["a"][r.Resource.UID] = i + 1
	}
	got := BuildCounted(results, passes, nil, now, Options{MaxResultsPerReport: 10})
	if len(got.PolicyReports) < 10 {
		t.Fatalf("got %d reports, want the namespace split", len(got.PolicyReports))
	}
	total := 0
	for _, rep := range got.PolicyReports {
		want := 0
		for _, r := range rep.Results {
			want += passes["a"][r.Resources[0].UID]
		}
		if rep.Summary.Pass != want || rep.Summary.Fail != len(rep.Results) {
			t.Errorf("report %s: summary %+v for %d listed failures whose objects have %d counted passes", rep.Name, rep.Summary, len(rep.Results), want)
		}
		total += rep.Summary.Pass
	}
	if total != 100*101/2 {
		t.Errorf("passes add up to %d, want %d", total, 100*101/2)
	}
}
