package shard

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// endOfSpace is how the exclusive end of the last range, 2^64, is written.
const endOfSpace = "0x10000000000000000"

// Strings returns r's bounds as written in a KEP-5866 requirement and in an AuditShard's status: 0x and 16
// hexadecimal digits, and 0x10000000000000000 for the end of the last range.
func (r Range) Strings() (start, end string) {
	start = fmt.Sprintf("0x%016x", r.Start)
	if r.Last {
		return start, endOfSpace
	}
	return start, fmt.Sprintf("0x%016x", r.End)
}

// ParseRange parses bounds written by Strings.
func ParseRange(start, end string) (Range, error) {
	s, err := parseBound(start)
	if err != nil {
		return Range{}, fmt.Errorf("range start %q: %w", start, err)
	}
	if strings.EqualFold(end, endOfSpace) {
		return Range{Start: s, Last: true}, nil
	}
	e, err := parseBound(end)
	if err != nil {
		return Range{}, fmt.Errorf("range end %q: %w", end, err)
	}
	if e <= s {
		return Range{}, fmt.Errorf("range [%s, %s) is empty", start, end)
	}
	return Range{Start: s, End: e}, nil
}

func parseBound(v string) (uint64, error) {
	hex, ok := strings.CutPrefix(strings.ToLower(v), "0x")
	if !ok {
		return 0, fmt.Errorf("no 0x prefix")
	}
	n, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("not a 64-bit hexadecimal number: %w", err)
	}
	return n, nil
}

// Cover reports whether ranges cover the whole hash space, each hash exactly once: sorted by start, they
// begin at 0, each starts where the previous one ends, and the last one ends the space. A gap leaves
// namespaces that nobody audited; an overlap counts some twice.
func Cover(ranges []Range) bool {
	if len(ranges) == 0 {
		return false
	}
	sorted := slices.SortedFunc(slices.Values(ranges), func(a, b Range) int { return cmp.Compare(a.Start, b.Start) })
	var next uint64
	for i, r := range sorted {
		if r.Start != next {
			return false
		}
		if r.Last {
			return i == len(sorted)-1
		}
		next = r.End
	}
	return false
}

// FormatRanges writes ranges as half-open intervals, "[0x…, 0x…) [0x…, 0x…)", for logs.
func FormatRanges(ranges []Range) string {
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		start, end := r.Strings()
		parts[i] = "[" + start + ", " + end + ")"
	}
	return strings.Join(parts, " ")
}
