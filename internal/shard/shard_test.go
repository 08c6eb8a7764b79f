package shard

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apisharding "k8s.io/apiserver/pkg/sharding"
)

func TestRangesPartitionTheSpace(t *testing.T) {
	for n := 1; n <= 7; n++ {
		var prevEnd uint64
		for i := range n {
			r := RangeOf(i, n)
			if r.Start != prevEnd {
				t.Fatalf("n=%d i=%d: start %#x, previous end %#x", n, i, r.Start, prevEnd)
			}
			if r.Last != (i == n-1) {
				t.Fatalf("n=%d i=%d: last %v", n, i, r.Last)
			}
			prevEnd = r.End
		}
	}
	if r := RangeOf(1, 2); r.Start != 1<<63 {
		t.Fatalf("second half starts at %#x", r.Start)
	}
}

func TestEveryNamespaceHasExactlyOneOwner(t *testing.T) {
	for _, stripes := range []int{0, 1, 4, 8} {
		for _, n := range []int{2, 3, 4} {
			for k := range 2000 {
				ns := fmt.Sprintf("ns-%d", k)
				owners := 0
				for i := range n {
					if (Layout{Index: i, Count: n, Stripes: stripes}).OwnsNamespace(ns) {
						owners++
					}
				}
				if owners != 1 {
					t.Fatalf("stripes=%d n=%d: namespace %q has %d owners", stripes, n, ns, owners)
				}
			}
		}
	}
}

func TestRanges(t *testing.T) {
	r := func(start, end uint64) Range { return Range{Start: start, End: end} }
	for _, tc := range []struct {
		name string
		l    Layout
		want []Range
	}{
		{"unsharded", Layout{}, []Range{{Last: true}}},
		{"one member", Layout{Index: 0, Count: 1}, []Range{{Last: true}}},
		{"owns nothing", Member(3, 3, 1), nil},
		{"second of two, one range each", Layout{Index: 1, Count: 2, Stripes: 1}, []Range{{Start: 1 << 63, Last: true}}},
		// Written independently: j·2^64/12 for j = 1, 4, 7, 10 and the next.
		{"second of three, default stripes", Layout{Index: 1, Count: 3}, []Range{
			r(0x1555555555555555, 0x2aaaaaaaaaaaaaaa), r(0x5555555555555555, 0x6aaaaaaaaaaaaaaa),
			r(0x9555555555555555, 0xaaaaaaaaaaaaaaaa), r(0xd555555555555555, 0xeaaaaaaaaaaaaaaa),
		}},
		{"last of three, default stripes", Layout{Index: 2, Count: 3}, []Range{
			r(0x2aaaaaaaaaaaaaaa, 0x4000000000000000), r(0x6aaaaaaaaaaaaaaa, 0x8000000000000000),
			r(0xaaaaaaaaaaaaaaaa, 0xc000000000000000), {Start: 0xeaaaaaaaaaaaaaaa, Last: true},
		}},
		{"first of two, two stripes", Layout{Index: 0, Count: 2, Stripes: 2}, []Range{r(0, 1<<62), r(1<<63, 3<<62)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.l.Ranges(); !slices.Equal(got, tc.want) {
				t.Fatalf("Ranges() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The members of every layout together cover the hash space exactly once, and without one member they do not.
func TestMembersCoverTheSpace(t *testing.T) {
	for _, stripes := range []int{0, 1, 2, 4, 8} {
		for n := 1; n <= 7; n++ {
			var all []Range
			for i := range n {
				all = append(all, Layout{Index: i, Count: n, Stripes: stripes}.Ranges()...)
			}
			if !Cover(all) {
				t.Fatalf("stripes=%d n=%d: the members' ranges %v do not cover the space once", stripes, n, FormatRanges(all))
			}
			if n == 1 {
				continue
			}
			for missing := range n {
				var some []Range
				for i := range n {
					if i != missing {
						some = append(some, Layout{Index: i, Count: n, Stripes: stripes}.Ranges()...)
					}
				}
				if Cover(some) {
					t.Fatalf("stripes=%d n=%d: the members but %d cover the space", stripes, n, missing)
				}
			}
		}
	}
}

// Numbered namespaces hash close together: FNV-1a 64 mixes a name's last characters into the high bits only
// weakly. With one contiguous range per member, bench-000 … bench-999 leave a member of three with no
// namespace at all; striped, every member of 2, 3 and 4 owns some, none more than 1.2 times its share.
func TestNumberedNamespacesSpreadOverTheMembers(t *testing.T) {
	namespaces := make([]string, 1000)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("bench-%03d", i)
	}
	owned := func(n, stripes int) []int {
		counts := make([]int, n)
		for _, ns := range namespaces {
			for i := range n {
				if (Layout{Index: i, Count: n, Stripes: stripes}).OwnsNamespace(ns) {
					counts[i]++
				}
			}
		}
		return counts
	}
	// The test means something only while the contiguous layout is unbalanced.
	if contiguous := owned(3, 1); !slices.Contains(contiguous, 0) {
		t.Fatalf("one contiguous range per member gives %v namespaces to the three members: no member without any", contiguous)
	}
	for _, n := range []int{2, 3, 4} {
		got := owned(n, 0)
		if slices.Contains(got, 0) || slices.Max(got)*n > len(namespaces)*12/10 {
			t.Errorf("%d members with the default stripes own %v of %d namespaces: a member without any, or above 1.2 times its share",
				n, got, len(namespaces))
		}
	}
}

// The selector's wire form parses with the API server's parser into one requirement per range, the API
// server echoes it unchanged (metadata.shardInfo.selector is the parsed selector's String, see
// SelectionPredicate.SetShardInfoOnList), and the API server's filter agrees with OwnsNamespace on every
// object.
func TestSelectorMatchesTheAPIServer(t *testing.T) {
	for _, stripes := range []int{0, 1, 4} {
		for _, n := range []int{2, 3, 4} {
			for i := range n {
				testSelectorMatchesTheAPIServer(t, Layout{Index: i, Count: n, Stripes: stripes})
			}
		}
	}
}

func testSelectorMatchesTheAPIServer(t *testing.T, l Layout) {
	t.Helper()
	sent := l.Selector().String()
	parsed, err := apisharding.Parse(sent)
	if err != nil {
		t.Fatalf("%s: %q does not parse: %v", l, sent, err)
	}
	if echoed := parsed.String(); echoed != sent {
		t.Fatalf("%s: sent %q, the API server echoes %q", l, sent, echoed)
	}
	if got, want := len(parsed.Requirements()), len(l.Ranges()); got != want || strings.Count(sent, "shardRange(") != want {
		t.Fatalf("%s: %q parses into %d requirements, want one per range (%d)", l, sent, got, want)
	}
	for k := range 1000 {
		for _, ns := range []string{fmt.Sprintf("ns-%d", k), fmt.Sprintf("bench-%03d", k)} {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}}
			server, err := parsed.Matches(cm)
			if err != nil {
				t.Fatal(err)
			}
			client, err := l.Selector().Matches(cm)
			if err != nil {
				t.Fatal(err)
			}
			if want := l.OwnsNamespace(ns); server != want || client != want {
				t.Fatalf("%s, namespace %q: API server says %v, client-side filter %v, OwnsNamespace %v", l, ns, server, client, want)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		l  Layout
		ok bool
	}{
		{Layout{}, true},
		{Layout{Index: 0, Count: 1}, true},
		{Layout{Index: 2, Count: 3}, true},
		{Layout{Index: 3, Count: 3}, false},
		{Layout{Index: -1, Count: 3}, false},
		{Layout{Index: 1, Count: 0}, false},
		{Layout{Count: -2}, false},
	} {
		if err := tc.l.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: error %v, want ok=%v", tc.l, err, tc.ok)
		}
	}
}

func TestUnshardedOwnsEverything(t *testing.T) {
	l := Layout{}
	if !l.OwnsNamespace("anything") || !l.Selector().Empty() || l.String() != "unsharded" {
		t.Fatalf("zero layout: %v %q", l.Selector().String(), l)
	}
}

func TestMemberOutsideTheCountOwnsNothing(t *testing.T) {
	l := Member(3, 3, 7)
	if !l.None || !l.Sharded() || l.Validate() != nil {
		t.Fatalf("Member(3, 3, 7) = %+v (validate: %v), want an owner of nothing", l, l.Validate())
	}
	for k := range 200 {
		if ns := fmt.Sprintf("ns-%d", k); l.OwnsNamespace(ns) {
			t.Fatalf("%s owns %q", l, ns)
		}
	}
	if l.OwnsNamespace("") {
		t.Fatalf("%s owns the cluster-scoped objects", l)
	}
	if ok, err := l.Selector().Matches(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-1", Name: "x"}}); ok || err != nil {
		t.Fatalf("the selector of %s matches an object (%v, %v)", l, ok, err)
	}
	if got := Member(1, 3, 7); got != (Layout{Index: 1, Count: 3, Epoch: 7}) {
		t.Fatalf("Member(1, 3, 7) = %+v", got)
	}
}

func TestOrdinal(t *testing.T) {
	for _, tc := range []struct {
		set, pod string
		want     int
		ok       bool
	}{
		{"celaudit", "celaudit-0", 0, true},
		{"celaudit", "celaudit-12", 12, true},
		{"cel-audit", "cel-audit-3", 3, true},
		{"celaudit", "celaudit", 0, false},
		{"celaudit", "celaudit-", 0, false},
		{"celaudit", "celaudit-01", 0, false},
		{"celaudit", "celaudit-x", 0, false},
		{"celaudit", "celaudit--1", 0, false},
		{"celaudit", "other-0", 0, false},
		{"celaudit", "celaudit-7f9c-abcde", 0, false}, // a Deployment's pod
	} {
		got, err := Ordinal(tc.set, tc.pod)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("Ordinal(%q, %q) = %d, %v; want %d, ok=%v", tc.set, tc.pod, got, err, tc.want, tc.ok)
		}
	}
}

func TestEpochAnnotations(t *testing.T) {
	l := Layout{Index: 2, Count: 4, Epoch: 9}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: l.Annotations()}}
	if cm.Annotations["celaudit.io/shard-epoch"] != "9" || cm.Annotations["celaudit.io/shard"] != "2/4" {
		t.Fatalf("annotations %v", cm.Annotations)
	}
	if e, ok := EpochOf(cm); !ok || e != 9 {
		t.Fatalf("EpochOf = %d, %v", e, ok)
	}
	for _, v := range []map[string]string{nil, {"celaudit.io/shard-epoch": "x"}} {
		if _, ok := EpochOf(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: v}}); ok {
			t.Fatalf("EpochOf(%v) found an epoch", v)
		}
	}
}
