package report

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

// fuzzResults turns fuzzer bytes into results, four bytes per result: few namespaces, objects, policies and
// rules, so that results collide (duplicates, several results per object, objects in several namespaces'
// reports), every verdict and one the API does not know, and messages from empty to a few KiB, so that small
// limits split namespaces both by hash and into runs. Every fifth result's object has no UID, as the results
// about a resource that cannot be read. The last byte of an incomplete group is ignored.
func fuzzResults(data []byte) []audit.Result {
	namespaces := []string{"", "team-a", "team-b"}
	verdicts := []audit.Verdict{audit.Pass, audit.Fail, audit.Warn, audit.Error, audit.Skip, "bogus"}
	severities := []string{audit.SeverityHigh, "", "urgent"}
	var out []audit.Result
	for i := 0; i+4 <= len(data) && len(out) < 300; i += 4 {
		a, b, c, d := data[i], data[i+1], data[i+2], data[i+3]
		ns := namespaces[int(a)%len(namespaces)]
		name := fmt.Sprintf("w-%d", (a>>2)%8)
		uid := types.UID(fmt.Sprintf("uid-%s-%s", ns, name))
		if (a>>5)%5 == 4 {
			uid = ""
		}
		out = append(out, audit.Result{
			Policy:     fmt.Sprintf("p%d", b%3),
			Rule:       fmt.Sprintf("r%d", (b>>2)%4),
			Category:   "c",
			Severity:   severities[int(b>>4)%len(severities)],
			Verdict:    verdicts[int(c)%len(verdicts)],
			Message:    strings.Repeat(string(rune('a'+c%26)), int(d)*int(c>>4)),
			Properties: map[string]string{"k": fmt.Sprint(d % 2)},
			Resource:   audit.ObjectRef{APIVersion: "example.com/v1", Kind: "Widget", Namespace: ns, Name: name, UID: uid},
		})
	}
	return out
}

// fuzzPasses turns fuzzer bytes into counted passes of the objects fuzzResults names, two bytes each.
func fuzzPasses(data []byte) CountedPasses {
	namespaces := []string{"", "team-a", "team-b"}
	out := CountedPasses{}
	for i := 0; i+2 <= len(data) && i < 40; i += 2 {
		ns := namespaces[int(data[i])%len(namespaces)]
		uid := types.UID(fmt.Sprintf("uid-%s-w-%d", ns, (data[i]>>2)%10)) // some objects only have passes
		if out[ns] == nil {
			out[ns] = map[types.UID]int{}
		}
		out[ns][uid] += int(data[i+1] % 7)
	}
	return out
}

// listedRow is what the fuzz test compares of a listed result: where it is and what it says.
type listedRow struct {
	namespace string
	id        string
	result    v1alpha2.PolicyResult
	message   string
}

// FuzzBuildAndDiff builds the reports of arbitrary results under arbitrary limits and checks, with expectations
// computed from the input alone:
//
//   - the reports reassemble to the input: every distinct result (by audit.Result.ID) with a listed verdict is
//     listed exactly once, in its namespace's reports, with its verdict (an unknown one as error); the
//     summaries of a namespace's reports add up to its results and counted passes;
//   - each report stays under the limits: at most MaxResultsPerReport results, and results that serialize to at
//     most MaxReportBytes unless the report holds a single result too large on its own; no two reports of a
//     namespace share a name, and none takes a name held by another tool's report;
//   - Diff against the reports of other results (stored as read, or compacted as the cache holds them, with a
//     foreign report in the way) gives writes that, applied to them, leave exactly the desired reports and the
//     foreign one; and the same build diffed against that outcome writes nothing.
func FuzzBuildAndDiff(f *testing.F) {
	f.Add([]byte("abcdefghijklmnopqrstuvwxyz0123456789"), []byte("0123456789"), []byte{1, 3, 5, 2}, uint8(0), uint16(0), false, false)
	f.Add([]byte("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14"), []byte("\x01\x02\x03\x04"), []byte(nil), uint8(2), uint16(600), true, true)
	f.Add([]byte(strings.Repeat("\x00\x01\x31\xff", 40)), []byte(strings.Repeat("\x01\x01\x01\x01", 10)), []byte{0, 6, 4, 6}, uint8(3), uint16(2000), false, true)
	f.Add([]byte(strings.Repeat("\x05\x09\x11\x40\x0c\x02\x21\x80", 30)), []byte(strings.Repeat("\x05\x09\x11\x40", 30)), []byte{5, 2, 9, 1}, uint8(1), uint16(1), true, false)
	// One object with more results than a report may list: cut into runs.
	f.Add([]byte{1, 0, 1, 0, 1, 4, 1, 0, 1, 8, 1, 0, 5, 0, 3, 0}, []byte(nil), []byte{1, 2}, uint8(1), uint16(0), false, false)
	f.Add([]byte{1, 0, 1, 40, 1, 4, 1, 40, 1, 8, 1, 40, 1, 12, 2, 40}, []byte{1, 0, 1, 0}, []byte(nil), uint8(0), uint16(700), false, true)
	f.Fuzz(func(t *testing.T, data, oldData, passData []byte, maxResults uint8, maxBytes uint16, listPasses, cachedExisting bool) {
		opts := Options{MaxResultsPerReport: int(maxResults % 8), MaxReportBytes: int(maxBytes)}
		if maxBytes == 0 {
			opts.MaxReportBytes = -1 // no limit
		}
		if listPasses {
			opts.ListVerdicts = append(DefaultListVerdicts(), audit.Pass)
		}
		results, passes := fuzzResults(data), fuzzPasses(passData)

		// The reports of other results, as the cluster holds them, and a report of another tool in the way of
		// the first chunk name of team-a they leave free.
		old := stored(BuildCounted(fuzzResults(oldData), nil, nil, scanTime(), opts))
		held := sets.New[string]()
		for _, r := range old.PolicyReports {
			if r.Namespace == "team-a" {
				held.Insert(r.Name)
			}
		}
		foreign := v1alpha2.PolicyReport{ObjectMeta: metav1.ObjectMeta{Name: FreeChunkName(1, held), Namespace: "team-a", ResourceVersion: "3",
			Labels: map[string]string{ManagedByLabel: "kyverno"}}}
		old.PolicyReports = append(old.PolicyReports, foreign)

		existing := old
		if cachedExisting {
			existing = cached(t, old)
		}
		buildOpts := opts
		buildOpts.Chunks = ChunkCounts(existing)
		buildOpts.Taken = TakenNames(existing, nil)
		build := func() Reports {
			return BuildCounted(results, passes, PreviousTimestamps(existing), scanTime(), buildOpts)
		}
		desired := build()

		checkReassembles(t, results, passes, opts, desired)
		checkLimits(t, opts, buildOpts.Taken, desired)

		want := deepCopyReports(desired)
		applied := apply(t, old, Diff(desired, existing))
		if diff := compareReports(applied, want, foreign); diff != "" {
			t.Fatalf("the writes of Diff applied to the existing reports do not give the desired ones:\n%s", diff)
		}
		if c := Diff(build(), applied); !c.Empty() {
			t.Fatalf("the same build diffed against the written reports writes again: %+v", c)
		}
	})
}

// expectedVerdict is the verdict a report shows for v.
func expectedVerdict(v audit.Verdict) v1alpha2.PolicyResult {
	switch v {
	case audit.Pass, audit.Fail, audit.Warn, audit.Skip, audit.Error:
		return v1alpha2.PolicyResult(v)
	}
	return v1alpha2.StatusError
}

func checkReassembles(t *testing.T, results []audit.Result, passes CountedPasses, opts Options, got Reports) {
	t.Helper()
	listVerdicts := opts.ListVerdicts
	if listVerdicts == nil {
		listVerdicts = DefaultListVerdicts()
	}
	// What the input calls for, computed from the input.
	var wantRows []listedRow
	wantSummary := map[string]*v1alpha2.PolicyReportSummary{}
	summaryOf := func(m map[string]*v1alpha2.PolicyReportSummary, ns string) *v1alpha2.PolicyReportSummary {
		if m[ns] == nil {
			m[ns] = &v1alpha2.PolicyReportSummary{}
		}
		return m[ns]
	}
	count := func(s *v1alpha2.PolicyReportSummary, r v1alpha2.PolicyResult, n int) {
		switch r {
		case v1alpha2.StatusPass:
			s.Pass += n
		case v1alpha2.StatusFail:
			s.Fail += n
		case v1alpha2.StatusWarn:
			s.Warn += n
		case v1alpha2.StatusError:
			s.Error += n
		case v1alpha2.StatusSkip:
			s.Skip += n
		}
	}
	seen := sets.New[string]()
	for _, r := range results {
		id := r.ID()
		if seen.Has(id) {
			continue
		}
		seen.Insert(id)
		ns := r.Resource.Namespace
		count(summaryOf(wantSummary, ns), expectedVerdict(r.Verdict), 1)
		if slices.Contains(listVerdicts, audit.Verdict(expectedVerdict(r.Verdict))) {
			wantRows = append(wantRows, listedRow{ns, id, expectedVerdict(r.Verdict), r.Message})
		}
	}
	for ns, byUID := range passes {
		for _, n := range byUID {
			if n > 0 {
				count(summaryOf(wantSummary, ns), v1alpha2.StatusPass, n)
			}
		}
	}

	// What the reports hold.
	var gotRows []listedRow
	gotSummary := map[string]*v1alpha2.PolicyReportSummary{}
	add := func(ns string, s v1alpha2.PolicyReportSummary, rs []v1alpha2.PolicyReportResult) {
		sum := summaryOf(gotSummary, ns)
		sum.Pass += s.Pass
		sum.Fail += s.Fail
		sum.Warn += s.Warn
		sum.Error += s.Error
		sum.Skip += s.Skip
		for _, r := range rs {
			if len(r.Resources) == 1 && r.Resources[0].Namespace != ns {
				t.Errorf("report of namespace %q lists a result on an object of namespace %q", ns, r.Resources[0].Namespace)
			}
			gotRows = append(gotRows, listedRow{ns, r.Properties[audit.PropResultID], r.Result, r.Message})
		}
	}
	for _, r := range got.PolicyReports {
		if r.Namespace == "" {
			t.Errorf("PolicyReport %s without a namespace", r.Name)
		}
		add(r.Namespace, r.Summary, r.Results)
	}
	for _, r := range got.ClusterPolicyReports {
		add("", r.Summary, r.Results)
	}

	byRow := func(a, b listedRow) int {
		return strings.Compare(a.namespace+"\x00"+a.id, b.namespace+"\x00"+b.id)
	}
	slices.SortFunc(wantRows, byRow)
	slices.SortFunc(gotRows, byRow)
	if !slices.Equal(gotRows, wantRows) {
		t.Errorf("listed results differ from the input's:\n got %d: %v\nwant %d: %v", len(gotRows), brief(gotRows), len(wantRows), brief(wantRows))
	}
	for ns, want := range wantSummary {
		if g := gotSummary[ns]; g == nil || *g != *want {
			t.Errorf("namespace %q: summaries add up to %+v, want %+v", ns, g, *want)
		}
	}
	for ns, g := range gotSummary {
		if wantSummary[ns] == nil {
			t.Errorf("namespace %q has reports %+v, but no results", ns, *g)
		}
	}
}

func brief(rows []listedRow) string {
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "\n  %q %s %s (%d bytes)", r.namespace, r.id[:min(8, len(r.id))], r.result, len(r.message))
	}
	return b.String()
}

func checkLimits(t *testing.T, opts Options, taken map[string]sets.Set[string], got Reports) {
	t.Helper()
	names := map[string]sets.Set[string]{}
	check := func(ns, name string, results []v1alpha2.PolicyReportResult) {
		if names[ns] == nil {
			names[ns] = sets.New[string]()
		}
		if names[ns].Has(name) {
			t.Errorf("namespace %q: two reports named %s", ns, name)
		}
		names[ns].Insert(name)
		if taken[ns].Has(name) {
			t.Errorf("namespace %q: report %s takes a name held by another tool", ns, name)
		}
		if opts.MaxResultsPerReport > 0 && len(results) > opts.MaxResultsPerReport {
			t.Errorf("namespace %q: report %s lists %d results, over the limit %d", ns, name, len(results), opts.MaxResultsPerReport)
		}
		if opts.MaxReportBytes > 0 && len(results) > 1 {
			data, err := json.Marshal(results)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > opts.MaxReportBytes {
				t.Errorf("namespace %q: report %s has %d results of %d bytes, over the limit %d", ns, name, len(results), len(data), opts.MaxReportBytes)
			}
		}
	}
	for _, r := range got.PolicyReports {
		check(r.Namespace, r.Name, r.Results)
	}
	for _, r := range got.ClusterPolicyReports {
		check("", r.Name, r.Results)
	}
}

func deepCopyReports(r Reports) Reports {
	var out Reports
	for i := range r.PolicyReports {
		out.PolicyReports = append(out.PolicyReports, *r.PolicyReports[i].DeepCopy())
	}
	for i := range r.ClusterPolicyReports {
		out.ClusterPolicyReports = append(out.ClusterPolicyReports, *r.ClusterPolicyReports[i].DeepCopy())
	}
	return out
}

// apply applies changes to the reports of a cluster as the API server would: deletes remove, updates replace
// (only an existing report, at its resourceVersion), creates add (only a name not taken).
func apply(t *testing.T, cluster Reports, c Changes) Reports {
	t.Helper()
	return Reports{
		PolicyReports: applyKind(t, cluster.PolicyReports, c.PolicyReports,
			func(r *v1alpha2.PolicyReport) *metav1.ObjectMeta { return &r.ObjectMeta }),
		ClusterPolicyReports: applyKind(t, cluster.ClusterPolicyReports, c.ClusterPolicyReports,
			func(r *v1alpha2.ClusterPolicyReport) *metav1.ObjectMeta { return &r.ObjectMeta }),
	}
}

func applyKind[T any](t *testing.T, cluster []T, c ObjectChanges[T], meta func(*T) *metav1.ObjectMeta) []T {
	t.Helper()
	objects := map[objectKey]T{}
	for _, o := range cluster {
		objects[keyOf(meta(&o))] = o
	}
	for _, o := range c.Delete {
		k := keyOf(meta(&o))
		if _, ok := objects[k]; !ok {
			t.Fatalf("delete of %v, which does not exist", k)
		}
		delete(objects, k)
	}
	for _, o := range c.Update {
		k := keyOf(meta(&o))
		have, ok := objects[k]
		if !ok || meta(&have).ResourceVersion != meta(&o).ResourceVersion {
			t.Fatalf("update of %v at resourceVersion %q: exists %v", k, meta(&o).ResourceVersion, ok)
		}
		objects[k] = o
	}
	for _, o := range c.Create {
		k := keyOf(meta(&o))
		if _, ok := objects[k]; ok {
			t.Fatalf("create of %v, which exists", k)
		}
		objects[k] = o
	}
	out := make([]T, 0, len(objects))
	for _, o := range objects {
		out = append(out, o)
	}
	return out
}

// compareReports compares the reports of a cluster with the desired ones and the foreign report: the same
// names, and for each the labels, summary and results; it returns "" when they agree.
func compareReports(cluster, desired Reports, foreign v1alpha2.PolicyReport) string {
	type view struct {
		Labels  map[string]string             `json:",omitempty"`
		Summary v1alpha2.PolicyReportSummary  `json:",omitempty"`
		Results []v1alpha2.PolicyReportResult `json:",omitempty"`
	}
	render := func(m map[string]view) string {
		data, _ := json.MarshalIndent(m, "", " ")
		return string(data)
	}
	got, want := map[string]view{}, map[string]view{}
	for _, r := range cluster.PolicyReports {
		got[r.Namespace+"/"+r.Name] = view{r.Labels, r.Summary, r.Results}
	}
	for _, r := range cluster.ClusterPolicyReports {
		got["/"+r.Name] = view{r.Labels, r.Summary, r.Results}
	}
	for _, r := range append(desired.PolicyReports, foreign) {
		want[r.Namespace+"/"+r.Name] = view{r.Labels, r.Summary, r.Results}
	}
	for _, r := range desired.ClusterPolicyReports {
		want["/"+r.Name] = view{r.Labels, r.Summary, r.Results}
	}
	if g, w := render(got), render(want); g != w {
		return "got " + g + "\nwant " + w
	}
	return ""
}
