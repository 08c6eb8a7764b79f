package results

import (
	"fmt"
	"maps"
	"math/rand/v2"
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

// namespacesHeld returns the namespaces the store says it has results in, sorted and comma-separated: a
// namespace whose last result goes must not linger.
func namespacesHeld(s *Store) string {
	out := s.Namespaces()
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

// An object covered by several policies, one of them with more passes than an inline count holds, keeps every
// count exactly, and removing policies in any order leaves the others intact. (TestStoreAgainstModel covers
// more policies than fit inline.)
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
	// A namespace of counted passes only has results: its report counts them.
	if got := namespacesHeld(s); got != "n,other" {
		t.Errorf("namespaces with results: %q, want n,other", got)
	}
}

// TestStoreAgainstModel applies the same pseudo-random sequence of Set, DeleteObject and DeletePolicy calls
// to a store and to a plain map of every (resource, object, policy) to its results, and checks after each call
// that what the store reports is what the map holds. The sequences cover what a pass record keeps apart:
// more policies on a resource than fit inline, pass counts around the largest inline one, whole results beside
// counted passes, and policies numbered differently on two resources.
func TestStoreAgainstModel(t *testing.T) {
	deploys := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	cases := []struct {
		name       string
		keepPasses bool
		policies   int
		passes     []int // the pass counts a Set picks from
		ops        int
	}{
		{name: "few policies, counts around the inline limit", policies: 6, passes: []int{1, 2, 3, 4, 5}, ops: 3000},
		{name: "more policies than fit inline", policies: 45, passes: []int{1, 1, 1, 2, 3, 4}, ops: 6000},
		{name: "passes kept whole", keepPasses: true, policies: 40, passes: []int{1, 2}, ops: 2000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.policies)))
			s := NewStore(nil, KeepPasses(tc.keepPasses))
			model := map[modelCell][]audit.Result{}
			gvrs := []schema.GroupVersionResource{cms, deploys}
			namespaces := []string{"n", "m", ""}
			uids := []string{"u0", "u1", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f1"}
			// An object lives in one namespace, as in a cluster.
			nsOf := func(uid string) string { return namespaces[len(uid)%len(namespaces)] }
			for i := range tc.ops {
				gvr := gvrs[rng.IntN(len(gvrs))]
				uid := uids[rng.IntN(len(uids))]
				ns := nsOf(uid)
				// Resources see the policies in different orders, so their numbers differ.
				p := rng.IntN(tc.policies)
				if gvr == deploys {
					p = tc.policies - 1 - p
				}
				policy := fmt.Sprintf("p%d", p)
				var op string
				switch r := rng.IntN(100); {
				case r < 2:
					op = "DeletePolicy " + policy + " everywhere"
					s.DeletePolicy(audit.VAPKey(policy), schema.GroupVersionResource{})
					for c := range model {
						if c.policy == policy {
							delete(model, c)
						}
					}
				case r < 4:
					op = "DeletePolicy " + policy + " on " + gvr.Resource
					s.DeletePolicy(audit.VAPKey(policy), gvr)
					for c := range model {
						if c.policy == policy && c.gvr == gvr {
							delete(model, c)
						}
					}
				case r < 6:
					op = "DeleteObject " + uid + " of " + gvr.Resource
					s.DeleteObject(ObjectKey{GVR: gvr, UID: types.UID(uid)}, ns)
					for c := range model {
						if c.uid == uid && c.gvr == gvr {
							delete(model, c)
						}
					}
				default:
					var res []audit.Result
					if r >= 15 { // else: an empty list, which removes the policy's results
						n := tc.passes[rng.IntN(len(tc.passes))]
						for j := range n {
							res = append(res, result(ns, uid, policy, audit.Pass, withProps("binding", fmt.Sprint(j))))
						}
						if r < 30 {
							res[len(res)-1].Verdict = []audit.Verdict{audit.Fail, audit.Warn, audit.Error, audit.Skip}[r%4]
						}
					}
					op = fmt.Sprintf("Set %s on %s of %s: %d results", policy, uid, gvr.Resource, len(res))
					c := modelCell{gvr: gvr, uid: uid, ns: ns, policy: policy}
					wantChanged := len(res) > 0 || model[c] != nil
					if prev := model[c]; len(res) > 0 && len(prev) == len(res) && summary(prev) == summary(res) {
						wantChanged = false
					}
					if got := s.Set(audit.VAPKey(policy), ObjectKey{GVR: gvr, UID: types.UID(uid)}, ns, res); got != wantChanged {
						t.Fatalf("op %d (%s): changed = %v, want %v", i, op, got, wantChanged)
					}
					if len(res) == 0 {
						delete(model, c)
					} else {
						model[c] = res
					}
				}
				checkAgainstModel(t, fmt.Sprintf("op %d (%s)", i, op), s, tc.keepPasses, namespaces, model)
			}
		})
	}
}

// modelCell is one policy's results on one object in TestStoreAgainstModel's model.
type modelCell struct {
	gvr             schema.GroupVersionResource
	uid, ns, policy string
}

// checkAgainstModel fails t unless NamespaceCounted, Counts, Summaries and Len of s agree with model, which
// holds every cell's results as they were set.
func checkAgainstModel(t *testing.T, when string, s *Store, keepPasses bool, namespaces []string, model map[modelCell][]audit.Result) {
	t.Helper()
	whole := map[string][]audit.Result{}
	passes := map[string]map[types.UID]int{}
	counts := map[audit.Verdict]int{}
	sums := map[audit.PolicyKey]Summary{}
	objects := map[ObjectKey]bool{}
	for c, res := range model {
		gvr, uid, ns, policy := c.gvr, c.uid, c.ns, c.policy
		objects[ObjectKey{GVR: gvr, UID: types.UID(uid)}] = true
		sum := sums[audit.VAPKey(policy)]
		sum.Matched++
		allPass, violations, judged := true, 0, false
		for _, r := range res {
			counts[r.Verdict]++
			judged = judged || r.Verdict != audit.Skip
			switch r.Verdict {
			case audit.Pass:
				sum.Pass++
			case audit.Fail:
				sum.Fail++
			case audit.Warn:
				sum.Warn++
			case audit.Error:
				sum.Error++
			case audit.Skip:
				sum.Skip++
			}
			if r.Verdict != audit.Pass {
				allPass = false
			}
			if r.Verdict == audit.Fail || r.Verdict == audit.Warn {
				violations++
			}
		}
		if judged {
			sum.Judged++
		}
		if violations > 0 {
			sum.Violating++
			if sum.Namespaces == nil {
				sum.Namespaces = map[string]int{}
			}
			sum.Namespaces[ns] += violations
		}
		sums[audit.VAPKey(policy)] = sum
		if allPass && !keepPasses {
			if passes[ns] == nil {
				passes[ns] = map[types.UID]int{}
			}
			passes[ns][types.UID(uid)] += len(res)
		} else {
			whole[ns] = append(whole[ns], res...)
		}
	}
	for _, ns := range namespaces {
		gotWhole, gotPasses := s.NamespaceCounted(ns)
		if summary(gotWhole) != summary(whole[ns]) {
			t.Fatalf("%s: results in %q = %q, want %q", when, ns, summary(gotWhole), summary(whole[ns]))
		}
		if !maps.Equal(gotPasses, passes[ns]) {
			t.Fatalf("%s: passes in %q = %v, want %v", when, ns, gotPasses, passes[ns])
		}
	}
	if got := s.Counts(); !maps.Equal(got, counts) {
		t.Fatalf("%s: Counts = %v, want %v", when, got, counts)
	}
	got := s.Summaries()
	if len(got) != len(sums) {
		t.Fatalf("%s: Summaries has %d policies, want %d", when, len(got), len(sums))
	}
	for p, want := range sums {
		if !got[p].Equal(want) {
			t.Fatalf("%s: summary of %s = %+v, want %+v", when, p, got[p], want)
		}
	}
	if s.Len() != len(objects) {
		t.Fatalf("%s: Len = %d, want %d", when, s.Len(), len(objects))
	}
}

// Policies that come and go on a resource do not push the next ones out of the inline record: a policy whose
// results on the resource are all deleted gives its number to the next new policy.
func TestStoreReusesPolicyNumbers(t *testing.T) {
	const uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	deploys := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	cases := []struct {
		name       string
		deleteOn   schema.GroupVersionResource
		wantInline bool
	}{
		{name: "deleted everywhere", deleteOn: schema.GroupVersionResource{}, wantInline: true},
		{name: "deleted on the resource", deleteOn: cms, wantInline: true},
		{name: "deleted on another resource", deleteOn: deploys, wantInline: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(nil)
			pass := func(policy string) []audit.Result { return []audit.Result{result("n", uid, policy, audit.Pass)} }
			s.Set(audit.VAPKey("d"), ObjectKey{GVR: deploys, UID: uid}, "n", pass("d"))
			for i := range inlinePolicies {
				s.Set(audit.VAPKey(fmt.Sprintf("p%d", i)), key(uid), "n", pass(fmt.Sprintf("p%d", i)))
			}
			s.DeletePolicy(audit.VAPKey("p3"), tc.deleteOn)
			s.Set(audit.VAPKey("new"), key(uid), "n", pass("new"))

			o, _ := s.byNS["n"][s.gvrIndex[cms]].Get(uid)
			if inline := o.more == nil; inline != tc.wantInline {
				t.Errorf("the new policy's pass is inline: %v, want %v", inline, tc.wantInline)
			}
			if got := s.Summaries()[audit.VAPKey("new")]; got.Pass != 1 || got.Matched != 1 {
				t.Errorf("summary of the new policy: %+v, want one pass", got)
			}
		})
	}
}
