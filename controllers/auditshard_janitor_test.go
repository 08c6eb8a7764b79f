package controllers

import (
	"slices"
	"testing"
	"time"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/shard"
)

func namedShard(name string, index, count int, epoch int64) v1alpha1.AuditShard {
	as := auditShard(index, count, epoch)
	as.Name = name
	return as
}

// After a scale from 4 to 2 (epoch 3 to 4), the AuditShards of indexes 2 and 3 go once they have been gone for
// the grace; those of 0 and 1, taken over by the new members, and one of a newer epoch than the leader's stay.
func TestGoneShards(t *testing.T) {
	l := shard.Layout{Index: 0, Count: 2, Epoch: 4}
	shards := []v1alpha1.AuditShard{
		namedShard("shard-0", 0, 2, 4),
		namedShard("shard-1", 1, 4, 3),
		namedShard("shard-2", 2, 4, 3),
		namedShard("shard-3", 3, 4, 3),
		namedShard("shard-5", 5, 6, 5),
	}
	since := map[string]time.Time{}
	if got := goneShards(shards, l, since, t0, time.Minute); len(got) != 0 {
		t.Fatalf("gone at once: %v", got)
	}
	if got := goneShards(shards, l, since, t0.Add(59*time.Second), time.Minute); len(got) != 0 {
		t.Fatalf("gone before the grace: %v", got)
	}
	// shard-3 was taken over by a member of a newer epoch meanwhile (the leader has not learnt of it yet):
	// when it is gone again, it starts over.
	back := slices.Clone(shards)
	back[3] = namedShard("shard-3", 3, 4, 5)
	goneShards(back, l, since, t0.Add(30*time.Second), time.Minute)
	got := goneShards(shards, l, since, t0.Add(time.Minute), time.Minute)
	if !slices.Equal(got, []string{"shard-2"}) {
		t.Fatalf("gone after the grace: %v, want [shard-2]", got)
	}
	if got := goneShards(shards, l, since, t0.Add(2*time.Minute), time.Minute); !slices.Equal(got, []string{"shard-2", "shard-3"}) {
		t.Fatalf("gone after shard-3's grace: %v, want [shard-2 shard-3]", got)
	}
}
