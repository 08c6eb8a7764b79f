package shard

import (
	"fmt"
	"math/bits"
	"strconv"

	apisharding "k8s.io/apimachinery/pkg/sharding"
)

// KeyNamespace is the field a member's range applies to: the object's namespace ("" for cluster-scoped
// objects), so that each namespace has one member.
const KeyNamespace = "object.metadata.namespace"

// Layout is one member's place among the members: it owns the Index-th of Count contiguous ranges of the
// 64-bit hash space. Epoch orders layouts: a membership change (a StatefulSet scaled) raises it, and a
// report written under a higher epoch is never overwritten from a lower one. The zero Layout is no
// sharding: one member owns everything.
type Layout struct {
	Index, Count int
	Epoch        int64
	// None is set for a member whose index is outside the count (a StatefulSet's pod being scaled away): it
	// owns nothing and writes nothing.
	None bool
}

// Sharded reports whether l splits the audit between more than one member, or leaves this member none of it.
func (l Layout) Sharded() bool { return l.Count > 1 || l.None }

// Validate reports a layout whose index is outside its count.
func (l Layout) Validate() error {
	switch {
	case l.Count < 0:
		return fmt.Errorf("shard count %d is negative", l.Count)
	case l.None:
		return nil
	case l.Count == 0 && l.Index == 0:
		return nil
	case l.Index < 0 || l.Index >= l.Count:
		return fmt.Errorf("shard index %d is outside 0..%d (shard count %d)", l.Index, l.Count-1, l.Count)
	}
	return nil
}

// String returns "index/count@epoch", or "unsharded".
func (l Layout) String() string {
	switch {
	case l.None:
		return fmt.Sprintf("%d/%d@%d (none)", l.Index, l.Count, l.Epoch)
	case !l.Sharded():
		return "unsharded"
	}
	return fmt.Sprintf("%d/%d@%d", l.Index, l.Count, l.Epoch)
}

// Range is a half-open range [Start, End) of the hash space; End is 2^64 for the last range, which a
// uint64 cannot hold, so Last says so.
type Range struct {
	Start uint64
	// End is the exclusive upper bound, meaningless when Last.
	End  uint64
	Last bool
}

// Contains reports whether h lies in r.
func (r Range) Contains(h uint64) bool {
	return h >= r.Start && (r.Last || h < r.End)
}

// Range returns the member's range: the Index-th of Count equal contiguous ranges, the whole space when
// the layout is not sharded, and an empty range (Start = End = 0) when it owns nothing.
func (l Layout) Range() Range {
	if l.None {
		return Range{}
	}
	if !l.Sharded() {
		return Range{Last: true}
	}
	return RangeOf(l.Index, l.Count)
}

// RangeOf returns the i-th of n equal contiguous ranges of [0, 2^64): [⌊i·2^64/n⌋, ⌊(i+1)·2^64/n⌋).
func RangeOf(i, n int) Range {
	start, _ := bits.Div64(uint64(i), 0, uint64(n))
	if i+1 >= n {
		return Range{Start: start, Last: true}
	}
	end, _ := bits.Div64(uint64(i+1), 0, uint64(n))
	return Range{Start: start, End: end}
}

// Hash returns the KEP-5866 hash of a key's value (FNV-1a 64), as a number.
func Hash(value string) uint64 {
	h, err := strconv.ParseUint(apisharding.HashField(value), 16, 64)
	if err != nil {
		// HashField formats a uint64 in 16 hex digits: it always parses.
		panic(err)
	}
	return h
}

// OwnsNamespace reports whether the member owns the objects of namespace ("" for cluster-scoped ones).
func (l Layout) OwnsNamespace(namespace string) bool {
	if l.None {
		return false
	}
	if !l.Sharded() {
		return true
	}
	return l.Range().Contains(Hash(namespace))
}

// Requirement returns the member's range as a KEP-5866 requirement on the namespace.
func (l Layout) Requirement() apisharding.ShardRangeRequirement {
	r := l.Range()
	end := "0x10000000000000000"
	if !r.Last {
		end = fmt.Sprintf("0x%016x", r.End)
	}
	return apisharding.ShardRangeRequirement{Key: KeyNamespace, Start: fmt.Sprintf("0x%016x", r.Start), End: end}
}

// Selector returns the member's range as a shard selector: Everything when the layout is not sharded. A
// layout that owns nothing has no selector (KEP-5866 ranges are never empty): its member reads nothing. Its
// String is the shardSelector of a LIST or WATCH; its Matches is the client-side filter.
func (l Layout) Selector() apisharding.Selector {
	if !l.Sharded() {
		return apisharding.Everything()
	}
	return apisharding.NewSelector(l.Requirement())
}
