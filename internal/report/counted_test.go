package report

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
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

// When one object's results alone exceed the limits, no hashed split fits and the namespace is cut into
// consecutive runs. Each object's counted passes are still summed in the report that lists the object (the
// first one, for an object cut across reports), and those of an object nothing lists go by the hash of its UID,
// as in a hashed split, to one of the first k reports, k the largest power of two the runs reach.
//
// The objects with only counted passes are idle-1 to idle-4. FNV-1a (32 bits) starts at 2166136261 and, for
// each byte b, takes h = (h xor b) * 16777619; mod 4 the start is 1 and the prime 3, so h mod 4 follows
// h = ((h xor b mod 4) * 3) mod 4. "idle-" (bytes 105, 100, 108, 101, 45) brings h to 2, and the last byte
// (49, 50, 51, 52 for "1" to "4") leaves h mod 4 = 1, 0, 3, 2.
func TestBuildCountedCutNamespace(t *testing.T) {
	// fails returns n failures of distinct rules on one Widget of team-a.
	fails := func(name string, n int) []audit.Result {
		var out []audit.Result
		for i := range n {
			out = append(out, newResult(withObject("team-a", name), withRule(fmt.Sprintf("spec.rule-%d", i))))
		}
		return out
	}
	uid := func(name string) types.UID { return types.UID("uid-team-a-" + name) }
	idle := map[types.UID]int{"idle-1": 1000, "idle-2": 2000, "idle-3": 3000, "idle-4": 4000}
	passes := func(byName map[string]int) CountedPasses {
		out := CountedPasses{"team-a": maps.Clone(idle)}
		for name, n := range byName {
			out["team-a"][uid(name)] = n
		}
		return out
	}
	type chunkWant struct {
		name    string
		summary v1alpha2.PolicyReportSummary
		objects []string // the objects of the listed results, in order
	}
	tests := []struct {
		name    string
		results []audit.Result
		passes  CountedPasses
		opts    Options
		want    []chunkWant
	}{
		{
			// Three results a report: w-a, w-b and the first of w-m's five; three more of w-m; the last of w-m,
			// w-x and w-y. k = 2: idle-2 and idle-4 (hash even) go to the first report, idle-1 and idle-3 to the
			// second.
			name:    "an object too large for one report, between others",
			results: slices.Concat(fails("w-a", 1), fails("w-b", 1), fails("w-m", 5), fails("w-x", 1), []audit.Result{newResult(withObject("team-a", "w-y"), withVerdict(audit.Warn))}),
			passes:  passes(map[string]int{"w-a": 1, "w-b": 20, "w-m": 300, "w-x": 4, "w-y": 50}),
			opts:    Options{MaxResultsPerReport: 3},
			want: []chunkWant{
				{"celaudit", v1alpha2.PolicyReportSummary{Pass: 1 + 20 + 300 + 2000 + 4000, Fail: 3}, []string{"w-a", "w-b", "w-m"}},
				{"celaudit-1", v1alpha2.PolicyReportSummary{Pass: 1000 + 3000, Fail: 3}, []string{"w-m", "w-m", "w-m"}},
				{"celaudit-2", v1alpha2.PolicyReportSummary{Pass: 4 + 50, Fail: 2, Warn: 1}, []string{"w-m", "w-x", "w-y"}},
			},
		},
		{
			// Every result is larger than the byte limit and gets a report of its own: five reports, so k = 4
			// and idle-1 to idle-4 go to the reports 1, 0, 3 and 2.
			name:    "every result alone over the byte limit",
			results: slices.Concat(fails("w-a", 1), fails("w-b", 2), fails("w-c", 1), fails("w-d", 1)),
			passes:  passes(map[string]int{"w-a": 1, "w-b": 20, "w-c": 300, "w-d": 4}),
			opts:    Options{MaxReportBytes: 10},
			want: []chunkWant{
				{"celaudit", v1alpha2.PolicyReportSummary{Pass: 1 + 2000, Fail: 1}, []string{"w-a"}},
				{"celaudit-1", v1alpha2.PolicyReportSummary{Pass: 20 + 1000, Fail: 1}, []string{"w-b"}},
				{"celaudit-2", v1alpha2.PolicyReportSummary{Pass: 4000, Fail: 1}, []string{"w-b"}},
				{"celaudit-3", v1alpha2.PolicyReportSummary{Pass: 300 + 3000, Fail: 1}, []string{"w-c"}},
				{"celaudit-4", v1alpha2.PolicyReportSummary{Pass: 4, Fail: 1}, []string{"w-d"}},
			},
		},
		{
			// w-x has a pass kept whole (its policy also fails on it) that sorts before its failure, where the
			// cut falls: the pass goes with the failure into the third report, and so do w-x's counted passes.
			name: "an object's unlisted result before a cut",
			results: slices.Concat(fails("w-a", 1), fails("w-b", 1), fails("w-m", 4), []audit.Result{
				newResult(withObject("team-a", "w-x"), withRule("spec.check"), withVerdict(audit.Pass), withMessage("")),
			}, fails("w-x", 1)),
			passes: passes(map[string]int{"w-a": 1, "w-b": 20, "w-m": 300, "w-x": 4}),
			opts:   Options{MaxResultsPerReport: 3},
			want: []chunkWant{
				{"celaudit", v1alpha2.PolicyReportSummary{Pass: 1 + 20 + 300 + 2000 + 4000, Fail: 3}, []string{"w-a", "w-b", "w-m"}},
				{"celaudit-1", v1alpha2.PolicyReportSummary{Pass: 1000 + 3000, Fail: 3}, []string{"w-m", "w-m", "w-m"}},
				{"celaudit-2", v1alpha2.PolicyReportSummary{Pass: 1 + 4, Fail: 1}, []string{"w-x"}},
			},
		},
		{
			// One report whose only result is over the byte limit: everything is counted there.
			name:    "a single result over the byte limit",
			results: fails("w-a", 1),
			passes:  passes(map[string]int{"w-a": 1}),
			opts:    Options{MaxReportBytes: 10},
			want: []chunkWant{
				{"celaudit", v1alpha2.PolicyReportSummary{Pass: 1 + 1000 + 2000 + 3000 + 4000, Fail: 1}, []string{"w-a"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildCounted(tt.results, tt.passes, nil, scanTime(), tt.opts)
			if len(got.ClusterPolicyReports) != 0 {
				t.Errorf("got %d cluster reports, want none", len(got.ClusterPolicyReports))
			}
			var reports []chunkWant
			for _, rep := range got.PolicyReports {
				c := chunkWant{name: rep.Name, summary: rep.Summary}
				for _, r := range rep.Results {
					if r.Resources[0].UID != uid(r.Resources[0].Name) {
						t.Errorf("report %s lists %s with UID %s", rep.Name, r.Resources[0].Name, r.Resources[0].UID)
					}
					c.objects = append(c.objects, r.Resources[0].Name)
				}
				if rep.Namespace != "team-a" {
					t.Errorf("report %s in namespace %q, want team-a", rep.Name, rep.Namespace)
				}
				reports = append(reports, c)
			}
			if !reflect.DeepEqual(reports, tt.want) {
				t.Errorf("got reports\n%+v\nwant\n%+v", reports, tt.want)
			}
		})
	}
}
