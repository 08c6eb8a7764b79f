package controllers

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/shard"
)

var rollupT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// auditShard builds the AuditShard of member index of count at epoch, with four ranges per member.
func auditShard(index, count int, epoch int64, policies ...v1alpha1.AuditShardPolicy) v1alpha1.AuditShard {
	return stripedShard(index, count, 4, epoch, policies...)
}

// stripedShard builds the AuditShard of member index of count at epoch owning stripes ranges: the ranges j of
// count·stripes equal ones with j mod count = index.
func stripedShard(index, count, stripes int, epoch int64, policies ...v1alpha1.AuditShardPolicy) v1alpha1.AuditShard {
	st := v1alpha1.AuditShardStatus{Index: int32(index), Count: int32(count), Epoch: epoch, Stripes: int32(stripes), Policies: policies}
	for j := index; j < count*stripes; j += count {
		start, end := shard.RangeOf(j, count*stripes).Strings()
		st.Ranges = append(st.Ranges, v1alpha1.HashRange{Start: start, End: end})
	}
	return v1alpha1.AuditShard{Status: st}
}

// shardEntry builds the entry of policy "p" at generation, audited at rollupT0 plus offset seconds, with
// fail results in the namespaces given as name, count, name, count...
func shardEntry(generation int64, offset int, failsByNamespace ...any) v1alpha1.AuditShardPolicy {
	e := v1alpha1.AuditShardPolicy{Name: "p", Generation: generation, AuditTime: metav1.NewTime(rollupT0.Add(time.Duration(offset) * time.Second)),
		Matched: 10, Judged: 9, Pass: 5, Skip: 1}
	for i := 0; i < len(failsByNamespace); i += 2 {
		n := failsByNamespace[i+1].(int)
		e.TopNamespaces = append(e.TopNamespaces, v1alpha1.NamespaceViolations{Namespace: failsByNamespace[i].(string), Violations: int64(n)})
		e.Fail += int64(n)
		e.Violating += int64(n)
	}
	return e
}

func TestRollUp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		epoch   int64 // the current one; 4 when 0
		shards  []v1alpha1.AuditShard
		want    results.Summary
		at      time.Time
		pending string // a part of the reason when incomplete; "" when complete
	}{
		{
			name: "three members, current epoch and generation",
			shards: []v1alpha1.AuditShard{
				auditShard(0, 3, 4, shardEntry(2, 0, "a", 3)),
				auditShard(1, 3, 4, shardEntry(2, 7, "b", 1, "c", 1)),
				auditShard(2, 3, 4, shardEntry(2, 3)),
			},
			want: results.Summary{Matched: 30, Judged: 27, Pass: 15, Skip: 3, Fail: 5, Violating: 5,
				Namespaces: map[string]int{"a": 3, "b": 1, "c": 1}},
			at: rollupT0.Add(7 * time.Second),
		},
		{
			name:  "members of an older epoch are ignored",
			epoch: 5,
			shards: []v1alpha1.AuditShard{
				auditShard(0, 2, 5, shardEntry(2, 0, "a", 1)),
				auditShard(1, 2, 5, shardEntry(2, 0)),
				auditShard(2, 3, 4, shardEntry(2, 0, "z", 9)),
			},
			want: results.Summary{Matched: 20, Judged: 18, Pass: 10, Skip: 2, Fail: 1, Violating: 1, Namespaces: map[string]int{"a": 1}},
			at:   rollupT0,
		},
		{
			name: "three members with one contiguous range each",
			shards: []v1alpha1.AuditShard{
				stripedShard(0, 3, 1, 4, shardEntry(2, 0)),
				stripedShard(1, 3, 1, 4, shardEntry(2, 0)),
				stripedShard(2, 3, 1, 4, shardEntry(2, 0)),
			},
			want: results.Summary{Matched: 30, Judged: 27, Pass: 15, Skip: 3},
			at:   rollupT0,
		},
		{
			name: "a member on one contiguous range among striped ones",
			shards: []v1alpha1.AuditShard{
				auditShard(0, 3, 4, shardEntry(2, 0)),
				stripedShard(1, 3, 1, 4, shardEntry(2, 0)),
				auditShard(2, 3, 4, shardEntry(2, 0)),
			},
			pending: "published (0/3, 1/3, 2/3) do not cover every namespace",
		},
		{
			name: "a member that publishes no ranges (one range in rangeStart and rangeEnd, dropped)",
			shards: []v1alpha1.AuditShard{
				auditShard(0, 3, 4, shardEntry(2, 0)),
				{Status: v1alpha1.AuditShardStatus{Index: 1, Count: 3, Epoch: 4, Policies: []v1alpha1.AuditShardPolicy{shardEntry(2, 0)}}},
				auditShard(2, 3, 4, shardEntry(2, 0)),
			},
			pending: "published (0/3, 2/3) do not cover every namespace",
		},
		{
			name: "a member with a range that does not parse",
			shards: []v1alpha1.AuditShard{
				auditShard(0, 3, 4, shardEntry(2, 0)),
				func() v1alpha1.AuditShard {
					s := auditShard(1, 3, 4, shardEntry(2, 0))
					s.Status.Ranges[2].End = "0x1"
					return s
				}(),
				auditShard(2, 3, 4, shardEntry(2, 0)),
			},
			pending: "published (0/3, 2/3) do not cover every namespace",
		},
		{
			name: "a member missing",
			shards: []v1alpha1.AuditShard{
				auditShard(0, 3, 4, shardEntry(2, 0)),
				auditShard(2, 3, 4, shardEntry(2, 0)),
			},
			pending: "published (0/3, 2/3) do not cover every namespace",
		},
		{
			name:  "only the member of an older epoch covers the missing range",
			epoch: 5,
			shards: []v1alpha1.AuditShard{
				auditShard(0, 2, 5, shardEntry(2, 0)),
				auditShard(1, 3, 4, shardEntry(2, 0)),
				auditShard(2, 3, 4, shardEntry(2, 0)),
			},
			pending: "epoch 5 that published (0/2) do not cover",
		},
		{
			name: "a member behind on the generation",
			shards: []v1alpha1.AuditShard{
				auditShard(0, 3, 4, shardEntry(2, 0)),
				auditShard(1, 3, 4, shardEntry(1, 0)),
				auditShard(2, 3, 4, shardEntry(2, 0)),
			},
			pending: "members 1/3 of shard epoch 4 have not completed an audit of generation 2",
		},
		{
			name: "a member without the policy",
			shards: []v1alpha1.AuditShard{
				auditShard(0, 3, 4, shardEntry(2, 0)),
				auditShard(1, 3, 4),
				auditShard(2, 3, 4, shardEntry(2, 0)),
			},
			pending: "members 1/3",
		},
		{
			name:    "no member",
			pending: "published (none)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			epoch := tc.epoch
			if epoch == 0 {
				epoch = 4
			}
			got := rollUp(tc.shards, epoch, "p", 2)
			if tc.pending != "" {
				if got.complete || !strings.Contains(got.pending, tc.pending) {
					t.Fatalf("complete %v, pending %q; want incomplete, pending containing %q", got.complete, got.pending, tc.pending)
				}
				if !got.summary.Equal(results.Summary{}) {
					t.Fatalf("an incomplete rollup has counts: %+v", got.summary)
				}
				return
			}
			if !got.complete || got.pending != "" {
				t.Fatalf("incomplete: %q", got.pending)
			}
			if !reflect.DeepEqual(got.summary, tc.want) {
				t.Fatalf("summary %+v, want %+v", got.summary, tc.want)
			}
			if !got.at.Equal(tc.at) {
				t.Fatalf("at %s, want %s", got.at, tc.at)
			}
		})
	}
}

// Namespaces are disjoint across members, so the cluster's top namespaces are among the members' own top
// ones: the leader's top 10, from each member's top 10 only, equals the top 10 of all namespaces.
func TestRollUpTopNamespacesFromMembersTopOnly(t *testing.T) {
	const count = 3
	all := map[string]int{}
	perMember := make([]results.Summary, count)
	// 40 namespaces with violations 1..40 spread unevenly: the top 10 (31..40) all land on member 0 or 1.
	for k := 1; k <= 40; k++ {
		ns := "ns-" + string(rune('a'+k%26)) + string(rune('a'+k/26))
		m := 2
		if k > 30 {
			m = k % 2
		}
		if perMember[m].Namespaces == nil {
			perMember[m].Namespaces = map[string]int{}
		}
		perMember[m].Namespaces[ns] = k
		perMember[m].Fail += k
		all[ns] = k
	}
	var shards []v1alpha1.AuditShard
	for i, s := range perMember {
		shards = append(shards, auditShard(i, count, 0, shardPolicy("p", 1, s)))
	}
	got := rollUp(shards, 0, "p", 1)
	if !got.complete {
		t.Fatalf("incomplete: %s", got.pending)
	}
	want := results.Summary{Namespaces: all}.TopNamespaces(topViolatingNamespaces)
	if top := got.summary.TopNamespaces(topViolatingNamespaces); !reflect.DeepEqual(top, want) {
		t.Fatalf("top namespaces %v, want %v", top, want)
	}
	if want[0].Violations != 40 || want[9].Violations != 31 {
		t.Fatalf("fixture: top %v", want)
	}
}
