package report

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	full := stored(BuildCounted(results, nil, nil, scanTime(), Options{MaxResultsPerReport: 16}))
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
		if len(r.Results) != 0 {
			t.Fatalf("%s keeps %d results in the cache", r.Name, len(r.Results))
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
	existing := stored(BuildCounted([]audit.Result{newResult()}, nil, nil, scanTime(), Options{}))
	existing.PolicyReports[0].Annotations = map[string]string{"note": "kept"}
	desired := BuildCounted([]audit.Result{newResult(), newResult(withObject("team-a", "w2"))}, nil, nil, scanTime(), Options{})
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

// The IDs and timestamps the cache keeps as text read back as they were, whatever the ID holds, and the
// earliest timestamp of an ID wins as it does across stored reports.
func TestCachedTimestampsRoundTrip(t *testing.T) {
	result := func(id string, secs int64, nanos int32) v1alpha2.PolicyReportResult {
		r := v1alpha2.PolicyReportResult{Timestamp: metav1.Timestamp{Seconds: secs, Nanos: nanos}}
		if id != "" {
			r.Properties = map[string]string{audit.PropResultID: id}
		}
		return r
	}
	tests := []struct {
		name    string
		results []v1alpha2.PolicyReportResult
		want    map[string]metav1.Timestamp
		// onlyStored are read from the stored report but not from the cache, which loses them.
		onlyStored map[string]metav1.Timestamp
	}{
		{name: "none", want: map[string]metav1.Timestamp{}},
		{
			name:    "plain IDs",
			results: []v1alpha2.PolicyReportResult{result("a1", 1767225600, 0), result("b2", 1767225601, 999999999)},
			want:    map[string]metav1.Timestamp{"a1": {Seconds: 1767225600}, "b2": {Seconds: 1767225601, Nanos: 999999999}},
		},
		{
			name:    "IDs with spaces and separators",
			results: []v1alpha2.PolicyReportResult{result("a b  c", 5, 6), result(" lead", 7, 8), result("x=1,y", 9, 0)},
			want:    map[string]metav1.Timestamp{"a b  c": {Seconds: 5, Nanos: 6}, " lead": {Seconds: 7, Nanos: 8}, "x=1,y": {Seconds: 9}},
		},
		{
			name:       "no ID, or a line break in the cache: left out",
			results:    []v1alpha2.PolicyReportResult{result("", 1, 1), result("two\nlines", 2, 2), result("kept", 3, 3)},
			want:       map[string]metav1.Timestamp{"kept": {Seconds: 3, Nanos: 3}},
			onlyStored: map[string]metav1.Timestamp{"two\nlines": {Seconds: 2, Nanos: 2}},
		},
		{
			name:    "an ID twice: the earliest",
			results: []v1alpha2.PolicyReportResult{result("d", 10, 5), result("d", 10, 4), result("d", 11, 0)},
			want:    map[string]metav1.Timestamp{"d": {Seconds: 10, Nanos: 4}},
		},
		{
			name:    "negative and extreme values",
			results: []v1alpha2.PolicyReportResult{result("n", -62135596800, 0), result("m", 253402300799, 2147483647)},
			want:    map[string]metav1.Timestamp{"n": {Seconds: -62135596800}, "m": {Seconds: 253402300799, Nanos: 2147483647}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &v1alpha2.PolicyReport{Results: tt.results}
			r.Name, r.Namespace = NamePrefix, "team-a"
			r.Labels = map[string]string{ManagedByLabel: ManagedByValue}
			full := Reports{PolicyReports: []v1alpha2.PolicyReport{*r.DeepCopy()}}
			c := cached(t, full)
			if got := PreviousTimestamps(c); !maps.Equal(got, tt.want) {
				t.Errorf("from the cache: %v, want %v", got, tt.want)
			}
			wantStored := maps.Clone(tt.want)
			maps.Copy(wantStored, tt.onlyStored)
			if got := PreviousTimestamps(full); !maps.Equal(got, wantStored) {
				t.Errorf("from the stored report: %v, want %v", got, wantStored)
			}
		})
	}
}

// A malformed line of the cache's text is skipped, not misread.
func TestCachedTimestampsSkipsMalformedLines(t *testing.T) {
	meta := &metav1.ObjectMeta{Annotations: map[string]string{ResultTimestampsAnnotation: "1 2 ok\nx 2 bad-secs\n1 y bad-nanos\n1 2\n1 99999999999 too-big\n\n3 4 last"}}
	got := map[string]metav1.Timestamp{}
	if !cachedTimestamps(meta, func(id string, ts metav1.Timestamp) { got[id] = ts }) {
		t.Fatal("annotation not found")
	}
	want := map[string]metav1.Timestamp{"ok": {Seconds: 1, Nanos: 2}, "last": {Seconds: 3, Nanos: 4}}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
