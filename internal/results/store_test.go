package results

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
)

var cms = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func key(uid string) ObjectKey { return ObjectKey{GVR: cms, UID: types.UID(uid)} }

func result(ns, name, policy string, v audit.Verdict, opts ...func(*audit.Result)) audit.Result {
	r := audit.Result{
		Policy:   policy,
		Verdict:  v,
		Resource: audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: name, UID: types.UID(name)},
	}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func withProps(kv ...string) func(*audit.Result) {
	return func(r *audit.Result) {
		r.Properties = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			r.Properties[kv[i]] = kv[i+1]
		}
	}
}

func summary(rs []audit.Result) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s/%s/%s/%s", r.Resource.UID, r.Policy, r.Rule, r.Verdict))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// contents is what NamespaceCounted returns for namespace, as one string: the results kept whole as summary
// writes them, then "uid:n" for each object's counted passes (the fixtures' UIDs are their names), sorted.
func contents(s *Store, namespace string) string {
	results, passes := s.NamespaceCounted(namespace)
	counted := make([]string, 0, len(passes))
	for uid, n := range passes {
		counted = append(counted, fmt.Sprintf("%s:%d", uid, n))
	}
	sort.Strings(counted)
	return strings.TrimSpace(summary(results) + " " + strings.Join(counted, " "))
}

func TestStore(t *testing.T) {
	type op func(s *Store) bool
	set := func(policy, uid, ns string, res ...audit.Result) op {
		return func(s *Store) bool { return s.Set(audit.VAPKey(policy), key(uid), ns, res) }
	}
	cases := []struct {
		name        string
		keepPasses  bool
		ops         []op
		wantChanged []bool
		ns          string
		want        string
		wantNotify  []string
	}{
		{
			name:        "set and replace",
			ops:         []op{set("p", "a", "n", result("n", "a", "p", audit.Fail)), set("p", "a", "n", result("n", "a", "p", audit.Pass))},
			wantChanged: []bool{true, true},
			ns:          "n", want: "a:1", wantNotify: []string{"n", "n"},
		},
		{
			name:        "unchanged results do not notify",
			ops:         []op{set("p", "a", "n", result("n", "a", "p", audit.Fail)), set("p", "a", "n", result("n", "a", "p", audit.Fail))},
			wantChanged: []bool{true, false},
			ns:          "n", want: "a/p//fail", wantNotify: []string{"n"},
		},
		{
			name: "passes are compacted but counted once per binding",
			ops: []op{set("p", "a", "n",
				result("n", "a", "p", audit.Pass, withProps("binding", "b1")),
				result("n", "a", "p", audit.Pass, withProps("binding", "b2")))},
			wantChanged: []bool{true},
			ns:          "n", want: "a:2", wantNotify: []string{"n"},
		},
		{
			name:       "kept passes come back whole",
			keepPasses: true,
			ops: []op{set("p", "a", "n",
				result("n", "a", "p", audit.Pass, withProps("binding", "b1")),
				result("n", "a", "p", audit.Pass, withProps("binding", "b2")))},
			wantChanged: []bool{true},
			ns:          "n", want: "a/p//pass a/p//pass", wantNotify: []string{"n"},
		},
		{
			name: "a compacted pass that gains a binding changes",
			ops: []op{
				set("p", "a", "n", result("n", "a", "p", audit.Pass)),
				set("p", "a", "n", result("n", "a", "p", audit.Pass), result("n", "a", "p", audit.Pass, withProps("binding", "b2"))),
			},
			wantChanged: []bool{true, true},
			ns:          "n", want: "a:2", wantNotify: []string{"n", "n"},
		},
		{
			name: "policies are kept apart and emptied one by one",
			ops: []op{
				set("q", "a", "n", result("n", "a", "q", audit.Warn)),
				set("p", "a", "n", result("n", "a", "p", audit.Fail)),
				set("q", "a", "n"),
				set("q", "a", "n"),
			},
			wantChanged: []bool{true, true, true, false},
			ns:          "n", want: "a/p//fail", wantNotify: []string{"n", "n", "n"},
		},
		{
			name:        "setting nothing on an unknown object is a no-op",
			ops:         []op{set("p", "a", "n")},
			wantChanged: []bool{false},
			ns:          "n", want: "",
		},
		{
			name:        "cluster-scoped objects live under the empty namespace",
			ops:         []op{set("p", "c", "", result("", "c", "p", audit.Error))},
			wantChanged: []bool{true},
			ns:          "", want: "c/p//error", wantNotify: []string{""},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var notified []string
			s := NewStore(func(ns string) { notified = append(notified, ns) }, KeepPasses(tc.keepPasses))
			for i, o := range tc.ops {
				if got := o(s); got != tc.wantChanged[i] {
					t.Errorf("op %d changed = %v, want %v", i, got, tc.wantChanged[i])
				}
			}
			if got := contents(s, tc.ns); got != tc.want {
				t.Errorf("results = %q, want %q", got, tc.want)
			}
			if strings.Join(notified, ",") != strings.Join(tc.wantNotify, ",") {
				t.Errorf("notified %q, want %q", notified, tc.wantNotify)
			}
		})
	}
}

func TestStoreDeletes(t *testing.T) {
	s := NewStore(nil)
	deploys := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	s.Set(audit.VAPKey("p"), key("a"), "n", []audit.Result{result("n", "a", "p", audit.Fail)})
	s.Set(audit.VAPKey("q"), key("a"), "n", []audit.Result{result("n", "a", "q", audit.Fail)})
	s.Set(audit.VAPKey("p"), key("b"), "m", []audit.Result{result("m", "b", "p", audit.Fail)})
	s.Set(audit.VAPKey("p"), ObjectKey{GVR: deploys, UID: "d"}, "m", []audit.Result{result("m", "d", "p", audit.Fail)})

	s.DeletePolicy(audit.VAPKey("p"), cms)
	if got := contents(s, "n") + " | " + contents(s, "m"); got != "a/q//fail | d/p//fail" {
		t.Fatalf("after deleting p on configmaps: %q", got)
	}
	s.DeletePolicy(audit.VAPKey("p"), schema.GroupVersionResource{})
	if got := contents(s, "n") + " | " + contents(s, "m"); got != "a/q//fail | " {
		t.Fatalf("after deleting p everywhere: %q", got)
	}
	if got := namespacesHeld(s); got != "n" {
		t.Fatalf("namespaces held after deleting p everywhere: %q", got)
	}
	s.DeleteObject(key("a"), "n")
	if s.Len() != 0 || namespacesHeld(s) != "" || contents(s, "n") != "" {
		t.Fatalf("store not empty: %d objects, namespaces %q, results in n %q", s.Len(), namespacesHeld(s), contents(s, "n"))
	}
}

// namespacesHeld returns the namespaces the store keeps a map for, sorted and comma-separated: a namespace
// whose last result goes must not linger as an empty map.
func namespacesHeld(s *Store) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.byNS))
	for ns := range s.byNS {
		out = append(out, ns)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// Compacted passes are counted under the UID of their object, whatever form the UID takes (the store keeps
// UUIDs in a compact form and other UIDs as they are).
func TestStoreCountsPassesByUID(t *testing.T) {
	for _, uid := range []types.UID{"u-1", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"} {
		s := NewStore(nil)
		deploys := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
		ref := audit.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "n", Name: "web", UID: uid}
		s.Set(audit.VAPKey("p"), ObjectKey{GVR: deploys, UID: uid}, "n", []audit.Result{{Policy: "p", Verdict: audit.Pass, Resource: ref}})
		results, passes := s.NamespaceCounted("n")
		if len(results) != 0 || len(passes) != 1 || passes[uid] != 1 {
			t.Fatalf("got results %+v and passes %v, want one pass counted for %s", results, passes, uid)
		}
	}
}

// An object covered by more policies than fit inline, or with more passes than an inline count holds, keeps
// every count exactly, and removing policies in any order leaves the others intact.
func TestStoreManyPolicies(t *testing.T) {
	const uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	passes := func(n int) []audit.Result {
		out := make([]audit.Result, n)
		for i := range out {
			out[i] = result("n", uid, "p", audit.Pass)
		}
		return out
	}
	s := NewStore(nil)
	want := 0
	for i := range 7 {
		n := i + 1
		if i == 2 {
			n = 70000 // more than an inline count holds
		}
		if !s.Set(audit.VAPKey(fmt.Sprintf("p%d", i)), key(uid), "n", passes(n)) {
			t.Fatalf("setting p%d changed nothing", i)
		}
		want += n
	}
	s.Set(audit.VAPKey("f"), key(uid), "n", []audit.Result{result("n", uid, "f", audit.Fail)})
	check := func(wantPasses int, wantResults string) {
		t.Helper()
		res, got := s.NamespaceCounted("n")
		if got[uid] != wantPasses || summary(res) != wantResults {
			t.Fatalf("passes %d and results %q, want %d and %q", got[uid], summary(res), wantPasses, wantResults)
		}
		if c := s.Counts(); c[audit.Pass] != wantPasses {
			t.Fatalf("Counts pass = %d, want %d", c[audit.Pass], wantPasses)
		}
	}
	check(want, uid+"/f//fail")
	if s.Set(audit.VAPKey("p2"), key(uid), "n", passes(70000)) || s.Set(audit.VAPKey("p6"), key(uid), "n", passes(7)) {
		t.Fatal("setting the same passes again reported a change")
	}
	for _, i := range []int{0, 6, 2, 4} {
		if !s.Set(audit.VAPKey(fmt.Sprintf("p%d", i)), key(uid), "n", nil) {
			t.Fatalf("removing p%d changed nothing", i)
		}
	}
	check(2+4+6, uid+"/f//fail") // p1, p3 and p5 are left
	s.DeletePolicy(audit.VAPKey("f"), schema.GroupVersionResource{})
	s.DeletePolicy(audit.VAPKey("p3"), cms)
	check(2+6, "")
	for _, p := range []string{"p1", "p5"} {
		s.Set(audit.VAPKey(p), key(uid), "n", nil)
	}
	if s.Len() != 0 || namespacesHeld(s) != "" {
		t.Fatalf("store not empty: %d objects in %q", s.Len(), namespacesHeld(s))
	}
}

func TestStoreNamespaceCounted(t *testing.T) {
	s := NewStore(nil)
	s.Set(audit.VAPKey("p"), key("a"), "n", []audit.Result{result("n", "a", "p", audit.Pass)})
	s.Set(audit.VAPKey("q"), key("a"), "n", []audit.Result{result("n", "a", "q", audit.Pass)})
	s.Set(audit.VAPKey("p"), key("b"), "n", []audit.Result{result("n", "b", "p", audit.Fail)})
	s.Set(audit.VAPKey("q"), key("b"), "n", []audit.Result{result("n", "b", "q", audit.Pass)})
	s.Set(audit.VAPKey("p"), key("c"), "n", []audit.Result{result("n", "c", "p", audit.Warn)})
	s.Set(audit.VAPKey("p"), key("d"), "other", []audit.Result{result("other", "d", "p", audit.Pass)})
	// The same object read in another version of its resource.
	v2 := ObjectKey{GVR: schema.GroupVersionResource{Version: "v2", Resource: "configmaps"}, UID: "a"}
	s.Set(audit.VAPKey("p"), v2, "n", []audit.Result{result("n", "a", "p", audit.Pass)})

	results, passes := s.NamespaceCounted("n")
	if got := summary(results); got != "b/p//fail c/p//warn" {
		t.Errorf("results = %q", got)
	}
	if len(passes) != 2 || passes["a"] != 3 || passes["b"] != 1 {
		t.Errorf("passes = %v, want a:3 b:1", passes)
	}
}
