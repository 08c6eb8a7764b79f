package shard

import (
	"fmt"
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
	for _, n := range []int{2, 3, 4} {
		for k := range 2000 {
			ns := fmt.Sprintf("ns-%d", k)
			owners := 0
			for i := range n {
				if (Layout{Index: i, Count: n}).OwnsNamespace(ns) {
					owners++
				}
			}
			if owners != 1 {
				t.Fatalf("n=%d: namespace %q has %d owners", n, ns, owners)
			}
		}
	}
}

// The selector's wire form parses with the API server's parser, and the API server's filter agrees with
// OwnsNamespace on every object.
func TestSelectorMatchesTheAPIServer(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		for i := range n {
			l := Layout{Index: i, Count: n}
			parsed, err := apisharding.Parse(l.Selector().String())
			if err != nil {
				t.Fatalf("%s: %q does not parse: %v", l, l.Selector().String(), err)
			}
			for k := range 500 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", k), Name: "x"}}
				got, err := parsed.Matches(cm)
				if err != nil {
					t.Fatal(err)
				}
				if want := l.OwnsNamespace(cm.Namespace); got != want {
					t.Fatalf("%s, namespace %q: API server says %v, OwnsNamespace %v", l, cm.Namespace, got, want)
				}
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
