package results

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
)

func TestSummaries(t *testing.T) {
	v2 := schema.GroupVersionResource{Version: "v2", Resource: "configmaps"}
	type set struct {
		policy  audit.PolicyKey
		obj     ObjectKey
		ns      string
		results []audit.Result
	}
	p, q, crd := audit.VAPKey("p"), audit.VAPKey("q"), audit.CRDKey("p") // a CRD may share a VAP's name
	cases := []struct {
		name       string
		keepPasses bool
		sets       []set
		deletes    []audit.PolicyKey
		want       map[audit.PolicyKey]Summary
	}{
		{
			name: "empty store",
			want: map[audit.PolicyKey]Summary{},
		},
		{
			name: "compacted passes are counted per result and objects once",
			sets: []set{
				{p, key("a"), "n", []audit.Result{
					result("n", "a", "p", audit.Pass, withProps("binding", "b1")),
					result("n", "a", "p", audit.Pass, withProps("binding", "b2")),
				}},
				{p, key("b"), "n", []audit.Result{result("n", "b", "p", audit.Pass)}},
			},
			want: map[audit.PolicyKey]Summary{p: {Matched: 2, Judged: 2, Pass: 3}},
		},
		{
			name:       "kept passes are counted the same",
			keepPasses: true,
			sets: []set{
				{p, key("a"), "n", []audit.Result{
					result("n", "a", "p", audit.Pass, withProps("binding", "b1")),
					result("n", "a", "p", audit.Pass, withProps("binding", "b2")),
				}},
				{p, key("b"), "n", []audit.Result{result("n", "b", "p", audit.Pass)}},
			},
			want: map[audit.PolicyKey]Summary{p: {Matched: 2, Judged: 2, Pass: 3}},
		},
		{
			name: "every verdict, violations by namespace, cluster-scoped under the empty namespace",
			sets: []set{
				{p, key("a"), "n", []audit.Result{
					result("n", "a", "p", audit.Fail, withProps("rule", "r1")),
					result("n", "a", "p", audit.Fail, withProps("rule", "r2")),
					result("n", "a", "p", audit.Skip, withProps("rule", "r3")),
				}},
				{p, key("b"), "n", []audit.Result{result("n", "b", "p", audit.Warn), result("n", "b", "p", audit.Pass, withProps("binding", "b2"))}},
				{p, key("c"), "m", []audit.Result{result("m", "c", "p", audit.Error)}},
				{p, key("d"), "m", []audit.Result{result("m", "d", "p", audit.Pass)}},
				{p, key("e"), "", []audit.Result{result("", "e", "p", audit.Warn)}},
				{p, key("f"), "", []audit.Result{result("", "f", "p", audit.Skip)}},
				{p, key("g"), "m", []audit.Result{result("m", "g", "p", audit.Skip, withRule("validations[0]"))}},
			},
			want: map[audit.PolicyKey]Summary{p: {
				Matched: 7, Judged: 5, Violating: 3, Pass: 2, Fail: 2, Warn: 2, Error: 1, Skip: 3,
				Namespaces: map[string]int{"n": 3, "": 1},
			}},
		},
		{
			name: "policies are kept apart, also of different sources with one name",
			sets: []set{
				{p, key("a"), "n", []audit.Result{result("n", "a", "p", audit.Fail)}},
				{q, key("a"), "n", []audit.Result{result("n", "a", "q", audit.Pass)}},
				{crd, key("a"), "n", []audit.Result{result("n", "a", "p", audit.Error)}},
				{q, key("b"), "o", []audit.Result{result("o", "b", "q", audit.Warn)}},
			},
			want: map[audit.PolicyKey]Summary{
				p:   {Matched: 1, Judged: 1, Violating: 1, Fail: 1, Namespaces: map[string]int{"n": 1}},
				q:   {Matched: 2, Judged: 2, Violating: 1, Pass: 1, Warn: 1, Namespaces: map[string]int{"o": 1}},
				crd: {Matched: 1, Judged: 1, Error: 1},
			},
		},
		{
			name: "an object read in two versions counts once per version",
			sets: []set{
				{crd, key("a"), "n", []audit.Result{result("n", "a", "p", audit.Fail)}},
				{crd, ObjectKey{GVR: v2, UID: "a"}, "n", []audit.Result{result("n", "a", "p", audit.Fail)}},
			},
			want: map[audit.PolicyKey]Summary{crd: {Matched: 2, Judged: 2, Violating: 2, Fail: 2, Namespaces: map[string]int{"n": 2}}},
		},
		{
			name: "a result about a whole resource is no matched object",
			sets: []set{
				{p, key("a"), "n", []audit.Result{result("n", "a", "p", audit.Pass)}},
				{p, ObjectKey{GVR: v2}, "", []audit.Result{result("", "", "p", audit.Error, withRule("read (v2/configmaps)"))}},
				{q, ObjectKey{GVR: v2}, "", []audit.Result{result("", "", "q", audit.Error, withRule("read (v2/configmaps)"))}},
			},
			want: map[audit.PolicyKey]Summary{
				p: {Matched: 1, Judged: 1, Pass: 1, Error: 1, Resources: 1, ResourceErrors: 1},
				q: {Matched: 0, Error: 1, Resources: 1, ResourceErrors: 1},
			},
		},
		{
			name: "configuration errors are counted apart, whatever their qualifiers",
			sets: []set{
				{p, key("a"), "n", []audit.Result{result("n", "a", "p", audit.Error, withRule("configuration"))}},
				{p, key("b"), "n", []audit.Result{result("n", "b", "p", audit.Error, withRule("configuration (param n/limits)"))}},
				{p, key("c"), "", []audit.Result{result("", "c", "p", audit.Error, withRule("validations[0]"))}},
				{p, key("d"), "", []audit.Result{result("", "d", "p", audit.Error, withRule("configurations"))}},
			},
			want: map[audit.PolicyKey]Summary{p: {Matched: 4, Judged: 4, Error: 4, Configuration: 2}},
		},
		{
			name: "a policy whose results are gone has no summary",
			sets: []set{
				{p, key("a"), "n", []audit.Result{result("n", "a", "p", audit.Fail)}},
				{q, key("a"), "n", []audit.Result{result("n", "a", "q", audit.Pass)}},
				{q, key("a"), "n", nil},
			},
			deletes: []audit.PolicyKey{p},
			want:    map[audit.PolicyKey]Summary{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(nil, KeepPasses(tc.keepPasses))
			for _, x := range tc.sets {
				s.Set(x.policy, x.obj, x.ns, x.results)
			}
			for _, k := range tc.deletes {
				s.DeletePolicy(k, schema.GroupVersionResource{})
			}
			got := s.Summaries()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Summaries() =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}

func TestViolations(t *testing.T) {
	cases := []struct {
		name       string
		s          Summary
		violations int
	}{
		{name: "nothing matched", s: Summary{}, violations: 0},
		{name: "passes and skips", s: Summary{Matched: 3, Pass: 2, Skip: 1}, violations: 0},
		{name: "a fail", s: Summary{Matched: 3, Pass: 2, Fail: 1}, violations: 1},
		{name: "a warn", s: Summary{Matched: 3, Pass: 2, Warn: 1}, violations: 1},
		{name: "an error is no violation", s: Summary{Matched: 3, Pass: 2, Error: 1}, violations: 0},
		{name: "fails and warns add up", s: Summary{Matched: 3, Fail: 2, Warn: 3}, violations: 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.Violations(); got != tc.violations {
				t.Errorf("Violations() = %d, want %d", got, tc.violations)
			}
		})
	}
}

func withRule(rule string) func(*audit.Result) {
	return func(r *audit.Result) { r.Rule = rule }
}

func TestTopNamespaces(t *testing.T) {
	s := Summary{Namespaces: map[string]int{"b": 3, "a": 3, "c": 7, "": 1, "d": 2}}
	cases := []struct {
		n    int
		want []NamespaceCount
	}{
		{n: 0, want: []NamespaceCount{}},
		{n: 1, want: []NamespaceCount{{"c", 7}}},
		{n: 3, want: []NamespaceCount{{"c", 7}, {"a", 3}, {"b", 3}}},
		{n: 10, want: []NamespaceCount{{"c", 7}, {"a", 3}, {"b", 3}, {"d", 2}, {"", 1}}},
		{n: -1, want: []NamespaceCount{{"c", 7}, {"a", 3}, {"b", 3}, {"d", 2}, {"", 1}}},
	}
	for _, tc := range cases {
		if got := s.TopNamespaces(tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("TopNamespaces(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if got := (Summary{}).TopNamespaces(10); len(got) != 0 {
		t.Errorf("TopNamespaces of a summary without violations = %v, want none", got)
	}
}

func TestSummaryEqual(t *testing.T) {
	base := Summary{Matched: 2, Violating: 1, Pass: 1, Fail: 1, Namespaces: map[string]int{"n": 1}}
	cases := []struct {
		name string
		o    Summary
		want bool
	}{
		{name: "same", o: Summary{Matched: 2, Violating: 1, Pass: 1, Fail: 1, Namespaces: map[string]int{"n": 1}}, want: true},
		{name: "other count", o: Summary{Matched: 2, Violating: 1, Pass: 1, Warn: 1, Namespaces: map[string]int{"n": 1}}, want: false},
		{name: "other namespace", o: Summary{Matched: 2, Violating: 1, Pass: 1, Fail: 1, Namespaces: map[string]int{"m": 1}}, want: false},
		{name: "no namespaces", o: Summary{Matched: 2, Violating: 1, Pass: 1, Fail: 1}, want: false},
		{name: "a resource not judged", o: Summary{Matched: 2, Violating: 1, Pass: 1, Fail: 1, Resources: 1, Namespaces: map[string]int{"n": 1}}, want: false},
		{name: "a resource error", o: Summary{Matched: 2, Violating: 1, Pass: 1, Fail: 1, ResourceErrors: 1, Namespaces: map[string]int{"n": 1}}, want: false},
		{name: "other judged objects", o: Summary{Matched: 2, Judged: 1, Violating: 1, Pass: 1, Fail: 1, Namespaces: map[string]int{"n": 1}}, want: false},
		{name: "a configuration error", o: Summary{Matched: 2, Violating: 1, Pass: 1, Fail: 1, Configuration: 1, Namespaces: map[string]int{"n": 1}}, want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := base.Equal(tc.o); got != tc.want {
				t.Errorf("Equal = %v, want %v", got, tc.want)
			}
		})
	}
}

// A member of a sharded audit counts only the namespaces it keeps; whole-resource results go with "".
func TestSummariesWhere(t *testing.T) {
	p := audit.VAPKey("p")
	s := NewStore(func(string) {})
	s.Set(p, key("a"), "kept", []audit.Result{result("kept", "a", "p", audit.Fail)})
	s.Set(p, key("b"), "dropped", []audit.Result{result("dropped", "b", "p", audit.Fail), result("dropped", "b", "p", audit.Warn, withProps("rule", "r2"))})
	s.Set(p, key("c"), "", []audit.Result{result("", "c", "p", audit.Pass)})
	keepNamed := func(ns string) bool { return ns == "kept" }
	want := map[audit.PolicyKey]Summary{p: {Matched: 1, Judged: 1, Violating: 1, Fail: 1, Namespaces: map[string]int{"kept": 1}}}
	if got := s.SummariesWhere(keepNamed); !reflect.DeepEqual(got, want) {
		t.Fatalf("kept namespace only: got %+v, want %+v", got, want)
	}
	all := map[audit.PolicyKey]Summary{p: {Matched: 3, Judged: 3, Violating: 2, Pass: 1, Fail: 2, Warn: 1, Namespaces: map[string]int{"kept": 1, "dropped": 2}}}
	if got := s.SummariesWhere(nil); !reflect.DeepEqual(got, all) {
		t.Fatalf("nil keep: got %+v, want %+v", got, all)
	}
}
