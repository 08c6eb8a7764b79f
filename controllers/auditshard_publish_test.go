package controllers

import (
	"context"
	"slices"
	"testing"

	"github.com/go-logr/logr"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/shard"
)

// published reports whether the publisher was asked to publish since the last call.
func published(p *shardPublisher) bool {
	select {
	case <-p.wake:
		return true
	default:
		return false
	}
}

// An idle member publishes nothing new: the same counts found by a later audit change neither the status
// nor its time, and do not wake the publisher.
func TestShardPublisherWritesOnChangeOnly(t *testing.T) {
	l := shard.Layout{Index: 1, Count: 3, Epoch: 7}
	p := newShardPublisher(nil, "celaudit-system", shard.Static(l), logr.Discard())
	s := results.Summary{Matched: 4, Judged: 4, Violating: 1, Pass: 3, Warn: 1, Namespaces: map[string]int{"b": 1}}

	p.Observed("p", 2, true, t0, s)
	if !published(p) {
		t.Fatal("a first complete audit did not wake the publisher")
	}
	first := p.status(l)
	// Written independently: the ranges 1, 4, 7 and 10 of twelve (j·2^64/12).
	wantRanges := []v1alpha1.HashRange{
		{Start: "0x1555555555555555", End: "0x2aaaaaaaaaaaaaaa"},
		{Start: "0x5555555555555555", End: "0x6aaaaaaaaaaaaaaa"},
		{Start: "0x9555555555555555", End: "0xaaaaaaaaaaaaaaaa"},
		{Start: "0xd555555555555555", End: "0xeaaaaaaaaaaaaaaa"},
	}
	if first.Index != 1 || first.Count != 3 || first.Epoch != 7 || first.Stripes != 4 || !slices.Equal(first.Ranges, wantRanges) {
		t.Fatalf("layout in status: %+v", first)
	}
	if len(first.Policies) != 1 || first.CompletePolicies != 1 {
		t.Fatalf("policies in status: %+v", first)
	}
	e := first.Policies[0]
	if e.Name != "p" || e.Generation != 2 || !e.AuditTime.Time.Equal(t0) || e.Matched != 4 || e.Warn != 1 || e.Violating != 1 ||
		len(e.TopNamespaces) != 1 || e.TopNamespaces[0].Namespace != "b" || e.TopNamespaces[0].Violations != 1 {
		t.Fatalf("entry %+v", e)
	}

	p.Observed("p", 2, true, t1, s)
	if published(p) {
		t.Fatal("the same counts found again woke the publisher")
	}
	if again := p.status(l); !again.Policies[0].AuditTime.Time.Equal(t0) {
		t.Fatalf("the same counts moved the audit time to %s", again.Policies[0].AuditTime)
	}

	// A new generation in progress: the last complete audit stays, no longer counted as complete.
	p.Observed("p", 3, false, t1, results.Summary{})
	if !published(p) {
		t.Fatal("a new generation did not wake the publisher")
	}
	if st := p.status(l); st.CompletePolicies != 0 || st.Policies[0].Generation != 2 {
		t.Fatalf("while generation 3 is audited: %+v", st)
	}

	// Its audit completes with other counts: a new time.
	s.Warn, s.Pass = 0, 4
	p.Observed("p", 3, true, t1, s)
	if !published(p) {
		t.Fatal("new counts did not wake the publisher")
	}
	if st := p.status(l); st.CompletePolicies != 1 || st.Policies[0].Generation != 3 || !st.Policies[0].AuditTime.Time.Equal(t1) || st.Policies[0].Warn != 0 {
		t.Fatalf("after generation 3's audit: %+v", st)
	}

	p.Forget("p")
	if !published(p) || len(p.status(l).Policies) != 0 {
		t.Fatal("a removed AuditPolicy stayed published")
	}
}

// A member scaled away (its ordinal at or beyond the replicas) owns nothing and writes no AuditShard: the
// publisher, whose client is nil here, returns before any request.
func TestShardPublisherOfMemberOwningNothingWritesNothing(t *testing.T) {
	none := shard.Member(3, 3, 8)
	if !none.None {
		t.Fatalf("ordinal 3 of 3 replicas: layout %s, want one that owns nothing", none)
	}
	p := newShardPublisher(nil, "celaudit-system", shard.Static(none), logr.Discard())
	p.Observed("p", 2, true, t0, results.Summary{Matched: 1, Judged: 1, Pass: 1})
	if err := p.publish(context.Background()); err != nil {
		t.Fatalf("publishing as a member owning nothing: %v", err)
	}
}
