package report

import (
	"maps"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

func TestChunkIndex(t *testing.T) {
	for _, tc := range []struct {
		name  string
		index int
		ok    bool
	}{
		{"celaudit", 0, true},
		{"celaudit-3", 3, true},
		{"celaudit-12", 12, true},
		{"celaudit.1", 0, true},
		{"celaudit.2", 0, true},
		{"celaudit-3.1", 3, true},
		{"celaudit-12.10", 12, true},
		{"celaudit-0", 0, false},
		{"celaudit.0", 0, false},
		{"celaudit.01", 0, false},
		{"celaudit-03", 0, false},
		{"celaudit.+1", 0, false},
		{"celaudit.-1", 0, false},
		{"celaudit.1.1", 0, false},
		{"celaudit-3.x", 0, false},
		{"celaudit.", 0, false},
		{"celaudit-", 0, false},
		{"celauditx", 0, false},
		{"celaudit-x", 0, false},
		{"polr-ns-team-a", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			index, ok := ChunkIndex(tc.name)
			if index != tc.index || ok != tc.ok {
				t.Fatalf("ChunkIndex(%q) = %d, %v; want %d, %v", tc.name, index, ok, tc.index, tc.ok)
			}
		})
	}
}

func TestFreeChunkName(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		index int
		taken []string
		want  string
	}{
		{"nothing taken", 0, nil, "celaudit"},
		{"first chunk taken", 0, []string{"celaudit"}, "celaudit.1"},
		{"first alternative taken too", 0, []string{"celaudit", "celaudit.1"}, "celaudit.2"},
		{"an alternative taken, not the name", 0, []string{"celaudit.1"}, "celaudit"},
		{"another chunk's name taken", 3, []string{"celaudit"}, "celaudit-3"},
		{"chunk 3 taken", 3, []string{"celaudit-3"}, "celaudit-3.1"},
		{"chunk 3 and its first alternatives taken", 3, []string{"celaudit-3", "celaudit-3.1", "celaudit-3.2"}, "celaudit-3.3"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			if got := FreeChunkName(tc.index, sets.New(tc.taken...)); got != tc.want {
				t.Fatalf("FreeChunkName(%d, %v) = %q, want %q", tc.index, tc.taken, got, tc.want)
			}
		})
	}
}

func TestTakenNames(t *testing.T) {
	managed := func(ns, name string) v1alpha2.PolicyReport {
		return v1alpha2.PolicyReport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: managedLabels()}}
	}
	foreign := func(ns, name string) v1alpha2.PolicyReport {
		return v1alpha2.PolicyReport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	for _, tc := range []struct {
		desc     string
		existing Reports
		foreign  map[string]sets.Set[string]
		want     map[string][]string
	}{
		{
			desc:     "nothing known",
			existing: Reports{PolicyReports: []v1alpha2.PolicyReport{managed("a", "celaudit"), managed("a", "celaudit-1")}},
			want:     map[string][]string{},
		},
		{
			desc:    "names found taken",
			foreign: map[string]sets.Set[string]{"a": sets.New("celaudit"), "": sets.New("celaudit-2")},
			want:    map[string][]string{"a": {"celaudit"}, "": {"celaudit-2"}},
		},
		{
			desc: "alternatives in use imply the names before them",
			existing: Reports{
				PolicyReports: []v1alpha2.PolicyReport{
					managed("a", "celaudit.2"), managed("a", "celaudit-1"), managed("a", "celaudit-3.1"),
					managed("b", "celaudit"),
				},
				ClusterPolicyReports: []v1alpha2.ClusterPolicyReport{{ObjectMeta: metav1.ObjectMeta{Name: "celaudit.1", Labels: managedLabels()}}},
			},
			want: map[string][]string{"a": {"celaudit", "celaudit-3", "celaudit.1"}, "": {"celaudit"}},
		},
		{
			desc: "reports celaudit does not own hold their names",
			existing: Reports{PolicyReports: []v1alpha2.PolicyReport{
				foreign("a", "celaudit.1"), foreign("b", "celaudit"), managed("a", "celaudit-x.1"), managed("a", "other.1"),
			}},
			want: map[string][]string{"a": {"celaudit.1"}, "b": {"celaudit"}},
		},
		{
			desc:     "both together",
			existing: Reports{PolicyReports: []v1alpha2.PolicyReport{managed("a", "celaudit.1")}},
			foreign:  map[string]sets.Set[string]{"a": sets.New("celaudit-1")},
			want:     map[string][]string{"a": {"celaudit", "celaudit-1"}},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			got := map[string][]string{}
			for ns, names := range TakenNames(tc.existing, tc.foreign) {
				if names.Len() > 0 {
					got[ns] = sets.List(names)
				}
			}
			if !maps.EqualFunc(got, tc.want, slices.Equal[[]string]) {
				t.Fatalf("TakenNames = %v, want %v", got, tc.want)
			}
		})
	}
}

// A chunk whose name another writer holds is published under an alternative; other chunks and namespaces keep
// their names, and every result is still published.
func TestBuildAvoidsTakenNames(t *testing.T) {
	split := func() []audit.Result { return manyResults("team-b", 40) }
	opts := Options{MaxResultsPerReport: 16}
	if got := refsOf(BuildCounted(split(), nil, nil, scanTime(), opts)); !slices.Equal(got, []reportRef{
		{"team-b", "celaudit"}, {"team-b", "celaudit-1"}, {"team-b", "celaudit-2"}, {"team-b", "celaudit-3"},
	}) {
		t.Fatalf("the fixture is split into %v, the test wants 4 chunks", got)
	}
	for _, tc := range []struct {
		desc    string
		results []audit.Result
		taken   map[string]sets.Set[string]
		want    []reportRef
	}{
		{
			desc:    "the namespace's only report",
			results: []audit.Result{newResult(withObject("team-a", "w1")), newResult(withObject("team-c", "w1"))},
			taken:   map[string]sets.Set[string]{"team-a": sets.New("celaudit")},
			want:    []reportRef{{"team-a", "celaudit.1"}, {"team-c", "celaudit"}},
		},
		{
			desc:    "the name and its first alternative",
			results: []audit.Result{newResult(withObject("team-a", "w1"))},
			taken:   map[string]sets.Set[string]{"team-a": sets.New("celaudit", "celaudit.1")},
			want:    []reportRef{{"team-a", "celaudit.2"}},
		},
		{
			desc:    "the cluster's report",
			results: []audit.Result{newResult(withObject("", "global")), newResult(withObject("team-a", "w1"))},
			taken:   map[string]sets.Set[string]{"": sets.New("celaudit")},
			want:    []reportRef{{"", "celaudit.1"}, {"team-a", "celaudit"}},
		},
		{
			desc:    "a name taken in another namespace",
			results: []audit.Result{newResult(withObject("team-a", "w1"))},
			taken:   map[string]sets.Set[string]{"team-z": sets.New("celaudit")},
			want:    []reportRef{{"team-a", "celaudit"}},
		},
		{
			desc:    "one chunk of a split namespace",
			results: split(),
			taken:   map[string]sets.Set[string]{"team-b": sets.New("celaudit-2")},
			want:    []reportRef{{"team-b", "celaudit"}, {"team-b", "celaudit-1"}, {"team-b", "celaudit-2.1"}, {"team-b", "celaudit-3"}},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			o := opts
			o.Taken = tc.taken
			got := BuildCounted(tc.results, nil, nil, scanTime(), o)
			if refs := refsOf(got); !slices.Equal(refs, tc.want) {
				t.Fatalf("reports %v, want %v", refs, tc.want)
			}
			assertSummariesAddUp(t, tc.results, got)
			for _, r := range got.PolicyReports {
				if !IsManaged(&r) {
					t.Errorf("report %s/%s is not labelled as celaudit's", r.Namespace, r.Name)
				}
			}
		})
	}
}

// The writes around a name taken by a report celaudit does not own, which the operator's cache does not hold:
// that report is never updated or deleted, the chunk is created under its alternative once the name is
// found taken, and once that exists, a restart (which no longer knows the name is taken) writes nothing.
func TestDiffAroundTakenNames(t *testing.T) {
	results := []audit.Result{newResult(withObject("team-a", "w1")), newResult(withObject("team-b", "w1"))}
	theirs := v1alpha2.PolicyReport{ObjectMeta: metav1.ObjectMeta{Name: "celaudit", Namespace: "team-a", ResourceVersion: "3"}}
	found := map[string]sets.Set[string]{"team-a": sets.New("celaudit")}
	published := stored(BuildCounted(results, nil, nil, scanTime(), Options{Taken: found}))
	for _, tc := range []struct {
		desc     string
		existing Reports
		foreign  map[string]sets.Set[string]
		want     changeNames
	}{
		{
			desc: "the name not yet known to be taken",
			want: changeNames{create: []string{"team-a/celaudit", "team-b/celaudit"}},
		},
		{
			desc:    "found taken: the alternative is created",
			foreign: found,
			want:    changeNames{create: []string{"team-a/celaudit.1", "team-b/celaudit"}},
		},
		{
			desc:     "their report among the existing ones: left alone, the alternative is created",
			existing: Reports{PolicyReports: []v1alpha2.PolicyReport{theirs}},
			want:     changeNames{create: []string{"team-a/celaudit.1", "team-b/celaudit"}},
		},
		{
			desc:     "published: nothing to write",
			existing: published,
			foreign:  found,
		},
		{
			desc:     "after a restart: nothing to write",
			existing: published,
		},
		{
			desc:     "after a restart, their report listed too: nothing to write",
			existing: Reports{PolicyReports: append([]v1alpha2.PolicyReport{theirs}, published.PolicyReports...)},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			opts := Options{Chunks: ChunkCounts(tc.existing), Taken: TakenNames(tc.existing, tc.foreign)}
			changes := Diff(BuildCounted(results, nil, nil, scanTime(), opts), tc.existing)
			if got := namesOf(changes.PolicyReports, policyMeta); !equalNames(got, tc.want) {
				t.Fatalf("changes %+v, want %+v", got, tc.want)
			}
		})
	}
}
