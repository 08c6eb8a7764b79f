package report

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

// What a reconcile reads of the reports besides their content (timestamps, chunk counts) is the same whether
// the cache compacted them or not, and the compacted ones hold little of the results.
func TestForCacheKeepsWhatReconcilesRead(t *testing.T) {
	var results []audit.Result
	for i := range 40 {
		name := "w" + strings.Repeat("x", i)
		results = append(results, newResult(withObject("team-a", name), withVerdict(audit.Fail), withMessage("too many replicas")))
		results = append(results, newResult(withObject("", name), withVerdict(audit.Warn)))
	}
	full := stored(Build(results, nil, scanTime(), Options{MaxResultsPerReport: 16}))
	compact := cached(t, full)

	if got, want := PreviousTimestamps(compact), PreviousTimestamps(full); !maps.Equal(got, want) || len(want) != 80 {
		t.Errorf("timestamps of cached reports: %d, of stored ones: %d, equal %v", len(got), len(want), maps.Equal(got, want))
	}
	if got, want := ChunkCounts(compact), ChunkCounts(full); !maps.Equal(got, want) || want["team-a"] < 2 {
		t.Errorf("chunk counts of cached reports %v, of stored ones %v", got, want)
	}
	for _, r := range compact.PolicyReports {
		if _, ok := cachedDigest(&r.ObjectMeta); !ok || len(r.ManagedFields) != 0 {
			t.Fatalf("%s: digest %v, %d managedFields", r.Name, r.Annotations, len(r.ManagedFields))
		}
		for _, res := range r.Results {
			if res.Message != "" || res.Policy != "" || len(res.Resources) != 0 || len(res.Properties) != 1 {
				t.Fatalf("%s keeps more than the ID and timestamp of a result: %+v", r.Name, res)
			}
		}
	}
	// Informers may transform an object twice: the second time changes nothing.
	again := cached(t, compact)
	for i := range again.PolicyReports {
		if !equality.Semantic.DeepEqual(again.PolicyReports[i], compact.PolicyReports[i]) {
			t.Fatalf("%s changed when transformed again", compact.PolicyReports[i].Name)
		}
	}
	// The digest follows the content: a result edited by hand in the cluster is told apart.
	edited := full.PolicyReports[0].DeepCopy()
	edited.Results[0].Message = "edited"
	e, _ := ForCache(edited)
	if d1, d2 := e.(*v1alpha2.PolicyReport).Annotations[ContentDigestAnnotation], compact.PolicyReports[0].Annotations[ContentDigestAnnotation]; d1 == d2 {
		t.Error("an edited result left the digest unchanged")
	}
}

func TestDiffOfCachedReportKeepsOthersAnnotations(t *testing.T) {
	existing := stored(Build([]audit.Result{newResult()}, nil, scanTime(), Options{}))
	existing.PolicyReports[0].Annotations = map[string]string{"note": "kept"}
	desired := Build([]audit.Result{newResult(), newResult(withObject("team-a", "w2"))}, nil, scanTime(), Options{})
	got := Diff(desired, cached(t, existing)).PolicyReports.Update
	if len(got) != 1 {
		t.Fatalf("got %d updates, want 1", len(got))
	}
	if a := got[0].Annotations; len(a) != 1 || a["note"] != "kept" {
		t.Fatalf("update annotations %v, want only note=kept", a)
	}
	if len(got[0].Results) != 2 {
		t.Fatalf("update has %d results, want the 2 desired", len(got[0].Results))
	}
}
