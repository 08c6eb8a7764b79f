package shard

import "testing"

func TestRangeStringsRoundTrip(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7} {
		for i := range n {
			r := RangeOf(i, n)
			start, end := r.Strings()
			got, err := ParseRange(start, end)
			if err != nil || got != r {
				t.Fatalf("%d/%d: %s..%s parses to %+v (%v), want %+v", i, n, start, end, got, err, r)
			}
		}
	}
	// Written independently: the second of two halves.
	if start, end := RangeOf(1, 2).Strings(); start != "0x8000000000000000" || end != "0x10000000000000000" {
		t.Fatalf("second half written %s..%s", start, end)
	}
	if start, end := RangeOf(0, 2).Strings(); start != "0x0000000000000000" || end != "0x8000000000000000" {
		t.Fatalf("first half written %s..%s", start, end)
	}
}

func TestParseRangeRejects(t *testing.T) {
	for _, tc := range [][2]string{
		{"0", "0x10"},
		{"0x10", "0x10"},
		{"0x20", "0x10"},
		{"0xzz", "0x10"},
		{"0x0", "0x100000000000000000"},
	} {
		if r, err := ParseRange(tc[0], tc[1]); err == nil {
			t.Errorf("%s..%s parsed to %+v", tc[0], tc[1], r)
		}
	}
}

func TestCover(t *testing.T) {
	third := func(i int) Range { return RangeOf(i, 3) }
	half := func(i int) Range { return RangeOf(i, 2) }
	for _, tc := range []struct {
		name   string
		ranges []Range
		want   bool
	}{
		{"none", nil, false},
		{"whole", []Range{{Last: true}}, true},
		{"three thirds, any order", []Range{third(2), third(0), third(1)}, true},
		{"two of three thirds", []Range{third(0), third(2)}, false},
		{"the last third missing", []Range{third(0), third(1)}, false},
		{"the first third missing", []Range{third(1), third(2)}, false},
		{"a third twice", []Range{third(0), third(1), third(1), third(2)}, false},
		{"halves and thirds mixed", []Range{half(0), third(1), third(2)}, false},
		{"a range after the last", []Range{half(0), half(1), {Start: 5, End: 6}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Cover(tc.ranges); got != tc.want {
				t.Fatalf("Cover = %v, want %v", got, tc.want)
			}
		})
	}
}
