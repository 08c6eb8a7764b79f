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
		out = append(out, fmt.Sprintf("%s/%s/%s/%s", r.Resource.Name, r.Policy, r.Rule, r.Verdict))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func TestStore(t *testing.T) {
	type op func(s *Store) bool
	set := func(policy, uid, ns string, res ...audit.Result) op {
		return func(s *Store) bool { return s.Set(policy, key(uid), ns, res) }
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
			ns:          "n", want: "a/p//pass", wantNotify: []string{"n", "n"},
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
			ns:          "n", want: "a/p//pass a/p/pass-2/pass", wantNotify: []string{"n"},
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
			ns:          "n", want: "a/p//pass a/p/pass-2/pass", wantNotify: []string{"n", "n"},
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
			if got := summary(s.Namespace(tc.ns)); got != tc.want {
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
	s.Set("p", key("a"), "n", []audit.Result{result("n", "a", "p", audit.Fail)})
	s.Set("q", key("a"), "n", []audit.Result{result("n", "a", "q", audit.Fail)})
	s.Set("p", key("b"), "m", []audit.Result{result("m", "b", "p", audit.Fail)})
	s.Set("p", ObjectKey{GVR: deploys, UID: "d"}, "m", []audit.Result{result("m", "d", "p", audit.Fail)})

	s.DeletePolicy("p", cms)
	if got := summary(s.Namespace("n")) + " | " + summary(s.Namespace("m")); got != "a/q//fail | d/p//fail" {
		t.Fatalf("after deleting p on configmaps: %q", got)
	}
	s.DeletePolicy("p", schema.GroupVersionResource{})
	if got := s.Namespaces(); strings.Join(got, ",") != "n" {
		t.Fatalf("namespaces after deleting p everywhere: %q", got)
	}
	s.DeleteObject(key("a"), "n")
	if s.Len() != 0 || len(s.Namespaces()) != 0 {
		t.Fatalf("store not empty: %d objects, namespaces %q", s.Len(), s.Namespaces())
	}
}

// Compacted passes come back with the full reference of their object, rebuilt from the store's tables.
func TestStoreRebuildsReferences(t *testing.T) {
	s := NewStore(nil)
	deploys := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	ref := audit.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "n", Name: "web", UID: "u-1"}
	s.Set("vap/p", ObjectKey{GVR: deploys, UID: "u-1"}, "n", []audit.Result{{Policy: "p", Verdict: audit.Pass, Resource: ref}})
	got := s.Namespace("n")
	if len(got) != 1 || got[0].Resource != ref || got[0].Policy != "p" || got[0].Verdict != audit.Pass {
		t.Fatalf("got %+v, want a pass of p on %+v", got, ref)
	}
}

func TestStoreNamespaceCounted(t *testing.T) {
	s := NewStore(nil)
	s.Set("p", key("a"), "n", []audit.Result{result("n", "a", "p", audit.Pass)})
	s.Set("q", key("a"), "n", []audit.Result{result("n", "a", "q", audit.Pass)})
	s.Set("p", key("b"), "n", []audit.Result{result("n", "b", "p", audit.Fail)})
	s.Set("q", key("b"), "n", []audit.Result{result("n", "b", "q", audit.Pass)})
	s.Set("p", key("c"), "n", []audit.Result{result("n", "c", "p", audit.Warn)})
	s.Set("p", key("d"), "other", []audit.Result{result("other", "d", "p", audit.Pass)})
	// The same object read in another version of its resource.
	v2 := ObjectKey{GVR: schema.GroupVersionResource{Version: "v2", Resource: "configmaps"}, UID: "a"}
	s.Set("p", v2, "n", []audit.Result{result("n", "a", "p", audit.Pass)})

	results, passes := s.NamespaceCounted("n")
	if got := summary(results); got != "b/p//fail c/p//warn" {
		t.Errorf("results = %q", got)
	}
	if len(passes) != 2 || passes["a"] != 3 || passes["b"] != 1 {
		t.Errorf("passes = %v, want a:3 b:1", passes)
	}
}
