package shard

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"

	apisharding "k8s.io/apimachinery/pkg/sharding"
)

// KeyNamespace is the field a member's range applies to: the object's namespace ("" for cluster-scoped
// objects), so that each namespace has one member.
const KeyNamespace = "object.metadata.namespace"

// DefaultStripes is how many ranges each member owns when a Layout does not say (Stripes 0).
//
// FNV-1a 64, the hash KEP-5866 fixes, mixes a name's last characters into the high bits only weakly: numbered
// namespaces (bench-000 … bench-999) hash close together, and one contiguous range per member left a member
// of three with nothing on the benchmark's namespaces. Count·Stripes ranges dealt out round-robin spread
// such clusters over the members; BENCHMARKS.md ("Shard key: namespace or UID, in numbers") measured 4 as
// the best of 1, 4 and 8 for 2, 3 and 4 members (max/mean 1.20 each). Names that differ only in their last
// one or two characters (ns-00 … ns-11) lie closer than any few ranges can separate and stay with one
// member. Each range is one shardRange(...) of the selector, so more stripes cost no request, only a longer
// selector.
const DefaultStripes = 4

// Layout is one member's place among the members: the 64-bit hash space is split into Count·Stripes equal
// contiguous ranges, and the member owns the ranges j with j mod Count = Index. Epoch orders layouts: a
// membership change (a StatefulSet scaled) raises it, and a report written under a higher epoch is never
// overwritten from a lower one. The zero Layout is no sharding: one member owns everything.
type Layout struct {
	Index, Count int
	// Stripes is the number of ranges each member owns; 0 means DefaultStripes, which every member of a
	// deployment uses (members that disagree do not cover the space, which the leader's check sees). 1 is one
	// contiguous range per member.
	Stripes int
	Epoch   int64
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

// Ranges returns the member's ranges in increasing order: the ranges Index, Index+Count, Index+2·Count, …
// of Count·Stripes equal contiguous ranges; the whole space when the layout is not sharded, and none when it
// owns nothing.
func (l Layout) Ranges() []Range {
	if l.None {
		return nil
	}
	if !l.Sharded() {
		return []Range{{Last: true}}
	}
	n := l.Count * l.stripes()
	out := make([]Range, 0, l.stripes())
	for j := l.Index; j < n; j += l.Count {
		out = append(out, RangeOf(j, n))
	}
	return out
}

// RangesPerMember returns the number of ranges each member of l's deployment owns: Stripes, or
// DefaultStripes when it is 0.
func (l Layout) RangesPerMember() int { return l.stripes() }

func (l Layout) stripes() int {
	if l.Stripes <= 0 {
		return DefaultStripes
	}
	return l.Stripes
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
	h := Hash(namespace)
	return slices.ContainsFunc(l.Ranges(), func(r Range) bool { return r.Contains(h) })
}

// Requirements returns the member's ranges as KEP-5866 requirements on the namespace, one per range, in
// increasing order.
func (l Layout) Requirements() []apisharding.ShardRangeRequirement {
	ranges := l.Ranges()
	out := make([]apisharding.ShardRangeRequirement, len(ranges))
	for i, r := range ranges {
		start, end := r.Strings()
		out[i] = apisharding.ShardRangeRequirement{Key: KeyNamespace, Start: start, End: end}
	}
	return out
}

// Selector returns the member's ranges as a shard selector, their OR (shardRange(...) || shardRange(...)):
// Everything when the layout is not sharded. A layout that owns nothing has no selector (KEP-5866 ranges are
// never empty): its member reads nothing. Its String is the shardSelector of a LIST or WATCH, in the form the
// API server echoes in a list's metadata.shardInfo; its Matches is the client-side filter.
func (l Layout) Selector() apisharding.Selector {
	switch {
	case l.None:
		// An empty range, which matches no object (and which the API server would refuse).
		return apisharding.NewSelector(apisharding.ShardRangeRequirement{Key: KeyNamespace, Start: "0x0000000000000000", End: "0x0000000000000000"})
	case !l.Sharded():
		return apisharding.Everything()
	}
	return apisharding.NewSelector(l.Requirements()...)
}
