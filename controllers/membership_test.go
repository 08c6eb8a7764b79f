package controllers

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/celaudit/celaudit/internal/shard"
)

// The --shard-* flags make a fixed layout, a StatefulSet membership, or none; a combination that cannot
// be a member's fails at start, naming the flag.
func TestShardFlags(t *testing.T) {
	t.Setenv("POD_NAME", "")
	t.Setenv("POD_NAMESPACE", "")
	// A sharded audit needs leader election; its Lease's namespace holds the AuditShards of fixed members.
	elect := func(args ...string) []string {
		return append([]string{"--leader-elect", "--leader-election-namespace=lease-ns"}, args...)
	}
	cases := []struct {
		name string
		args []string
		env  map[string]string
		// layout is the fixed layout wanted; set: the StatefulSet membership wanted (namespace/name#ordinal).
		layout *shard.Layout
		set    string
		// namespace is where the member's AuditShard goes.
		namespace string
		want      string // a part of the error; "" for none
	}{
		{name: "no flag: not sharded"},
		{name: "fixed", args: elect("--shard-index=2", "--shard-count=3"), layout: &shard.Layout{Index: 2, Count: 3}, namespace: "lease-ns"},
		{name: "fixed, one member", args: elect("--shard-index=0", "--shard-count=1"), layout: &shard.Layout{Index: 0, Count: 1}, namespace: "lease-ns"},
		{name: "fixed without leader election", args: []string{"--shard-index=0", "--shard-count=2"}, want: "a sharded audit needs --leader-elect"},
		{name: "StatefulSet without leader election", args: []string{"--shard-statefulset=celaudit", "--pod-name=celaudit-4", "--pod-namespace=ops"},
			want: "a sharded audit needs --leader-elect"},
		{name: "index without count", args: []string{"--shard-index=1"}, want: "--shard-index=1 needs --shard-count"},
		{name: "count without index", args: []string{"--shard-count=3"}, want: "--shard-count=3 needs --shard-index"},
		{name: "index = count", args: []string{"--shard-index=3", "--shard-count=3"}, want: "--shard-index must be in 0..2"},
		{name: "negative index", args: []string{"--shard-index=-1", "--shard-count=3"}, want: "--shard-index must be in 0..2"},
		{name: "no member", args: []string{"--shard-index=0", "--shard-count=0"}, want: "--shard-count must be at least 1"},
		{name: "StatefulSet", args: elect("--shard-statefulset=celaudit", "--pod-name=celaudit-4", "--pod-namespace=ops"), set: "ops/celaudit#4", namespace: "ops"},
		{name: "StatefulSet from the downward API", args: elect("--shard-statefulset=celaudit"),
			env: map[string]string{"POD_NAME": "celaudit-1", "POD_NAMESPACE": "celaudit-system"}, set: "celaudit-system/celaudit#1", namespace: "celaudit-system"},
		{name: "StatefulSet and fixed", args: []string{"--shard-statefulset=celaudit", "--pod-name=celaudit-0", "--pod-namespace=ops", "--shard-index=0", "--shard-count=2"},
			want: "exclude each other"},
		{name: "StatefulSet without a pod name", args: []string{"--shard-statefulset=celaudit", "--pod-namespace=ops"}, want: "set --pod-name or $POD_NAME"},
		{name: "pod of another StatefulSet", args: []string{"--shard-statefulset=celaudit", "--pod-name=other-0", "--pod-namespace=ops"},
			want: `pod name "other-0" is not the name of a pod of StatefulSet "celaudit"`},
		{name: "pod of a Deployment", args: []string{"--shard-statefulset=celaudit", "--pod-name=celaudit-5d8f9-x2x", "--pod-namespace=ops"},
			want: "does not end in the ordinal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("celaudit", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			opts := DefaultOptions()
			opts.BindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			s, err := opts.parse()
			switch {
			case tc.want != "":
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error containing %q", err, tc.want)
				}
				return
			case err != nil:
				t.Fatalf("got %v, want no error", err)
			}
			m := s.members
			if m.namespace != tc.namespace {
				t.Fatalf("AuditShards' namespace %q, want %q", m.namespace, tc.namespace)
			}
			switch {
			case tc.layout == nil && tc.set == "":
				if m.sharded() {
					t.Fatalf("sharded, want not")
				}
			case tc.layout != nil:
				if l, known := m.source.Layout(); !known || l != *tc.layout || m.statefulSet != nil {
					t.Fatalf("layout %v (known %v, StatefulSet %v), want %v", l, known, m.statefulSet, *tc.layout)
				}
			default:
				set := m.statefulSet
				if set == nil {
					t.Fatal("no StatefulSet membership")
				}
				if got := fmt.Sprintf("%s/%s#%d", set.Namespace, set.Name, set.Ordinal); got != tc.set {
					t.Fatalf("StatefulSet membership %s, want %s", got, tc.set)
				}
				if _, known := m.source.Layout(); known {
					t.Fatal("layout known before the StatefulSet is read")
				}
			}
		})
	}
}

// A member's layout follows the StatefulSet: its ordinal, the replicas, the generation as epoch; an ordinal
// not below the replicas owns nothing, and a stale read (an older generation) never takes the epoch back.
func TestStatefulSetLayout(t *testing.T) {
	m := &statefulSetMembership{Namespace: "ops", Name: "celaudit", Ordinal: 2, Layouts: &shard.Dynamic{}}
	set := func(replicas *int32, generation int64) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: generation}, Spec: appsv1.StatefulSetSpec{Replicas: replicas}}
	}
	steps := []struct {
		set  *appsv1.StatefulSet
		want shard.Layout
	}{
		{set(ptr.To[int32](3), 1), shard.Layout{Index: 2, Count: 3, Epoch: 1}},
		{set(ptr.To[int32](2), 2), shard.Layout{Index: 2, Count: 2, Epoch: 2, None: true}},
		{set(ptr.To[int32](3), 1), shard.Layout{Index: 2, Count: 2, Epoch: 2, None: true}}, // stale
		{set(ptr.To[int32](4), 3), shard.Layout{Index: 2, Count: 4, Epoch: 3}},
		{set(nil, 4), shard.Layout{Index: 2, Count: 1, Epoch: 4, None: true}}, // replicas unset: 1
	}
	for i, s := range steps {
		l := m.layoutOf(s.set)
		m.Layouts.Set(l)
		if l != s.want {
			t.Fatalf("step %d: layout %+v, want %+v", i, l, s.want)
		}
	}
}
