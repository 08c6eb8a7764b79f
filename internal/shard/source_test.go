package shard

import "testing"

func TestDynamicTellsChangesOnly(t *testing.T) {
	var d Dynamic
	if _, ok := d.Layout(); ok {
		t.Fatal("zero Dynamic knows a layout")
	}
	var got []Layout
	d.Subscribe(func(l Layout) { got = append(got, l) })
	a := Layout{Index: 0, Count: 3, Epoch: 1}
	b := Layout{Index: 0, Count: 2, Epoch: 2}
	d.Set(a)
	d.Set(a)
	d.Set(b)
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("told %v, want [%v %v]", got, a, b)
	}
	if l, ok := d.Layout(); !ok || l != b {
		t.Fatalf("layout %v %v", l, ok)
	}
}

func TestStatic(t *testing.T) {
	l := Layout{Index: 1, Count: 2}
	if got, ok := Static(l).Layout(); !ok || got != l {
		t.Fatalf("static layout %v %v", got, ok)
	}
}
