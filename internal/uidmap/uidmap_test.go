package uidmap

import (
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestPack(t *testing.T) {
	cases := []struct {
		uid    types.UID
		packed bool
	}{
		{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", true},
		{"00000000-0000-0000-0000-000000000000", true},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", true},
		{"0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", false}, // upper case would not come back the same
		{"0f1e2d3c4b5a69788796a5b4c3d2e1f0", false},
		{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f", false},
		{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f00", false},
		{"0f1e2d3c+4b5a-6978-8796-a5b4c3d2e1f0", false},
		{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1g0", false},
		{"{f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", false},
		{"", false},
		{"uid-a", false},
	}
	for _, tc := range cases {
		k, ok := Pack(tc.uid)
		if ok != tc.packed {
			t.Errorf("Pack(%q) packed = %v, want %v", tc.uid, ok, tc.packed)
			continue
		}
		if ok && k.UID() != tc.uid {
			t.Errorf("Pack(%q).UID() = %q", tc.uid, k.UID())
		}
	}
}

// canonical is the test's own statement of a canonical UUID, independent of Pack: 36 characters, lowercase
// hexadecimal digits with hyphens after the 8th, 12th, 16th and 20th.
var canonical = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// wantKey is the key of a canonical UID, written independently of Pack: its 32 hexadecimal digits decoded.
func wantKey(t *testing.T, s string) Key {
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != 16 {
		t.Fatalf("%q: not 16 bytes of hexadecimal: %v", s, err)
	}
	return Key(b)
}

// checkPack checks that Pack packs s exactly when it is canonical, into the bytes its digits spell, and that
// the key gives back s.
func checkPack(t *testing.T, s string) (Key, bool) {
	k, ok := Pack(types.UID(s))
	if want := canonical.MatchString(s); ok != want {
		t.Fatalf("Pack(%q) packed = %v, want %v", s, ok, want)
	}
	if !ok {
		return k, false
	}
	if want := wantKey(t, s); k != want {
		t.Fatalf("Pack(%q) = %x, want %x", s, k, want)
	}
	if string(k.UID()) != s {
		t.Fatalf("%q packed and came back as %q", s, k.UID())
	}
	return k, true
}

func FuzzPack(f *testing.F) {
	f.Add("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f1")
	f.Add("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fA", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fa")
	f.Add("00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff")
	f.Add("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, oka := checkPack(t, a)
		kb, okb := checkPack(t, b)
		// Distinct canonical UIDs never share a key; the same UID always gets the same one.
		if oka && okb && (a == b) != (ka == kb) {
			t.Fatalf("%q and %q: keys %x and %x", a, b, ka, kb)
		}
		if !oka {
			return
		}
		// Every canonical UID one digit away from a, whatever the digit and its replacement, has a key of
		// its own: the fuzzer rarely makes two canonical UIDs that differ in a single place by itself.
		u := []byte(a)
		for i := range u {
			if u[i] == '-' {
				continue
			}
			orig := u[i]
			for _, c := range []byte("0123456789abcdef") {
				if c == orig {
					continue
				}
				u[i] = c
				if k, ok := checkPack(t, string(u)); !ok || k == ka {
					t.Fatalf("%q and %q: keys %x and %x (packed %v)", a, u, ka, k, ok)
				}
			}
			u[i] = orig
		}
	})
}

func TestMap(t *testing.T) {
	var m Map[int]
	uids := []types.UID{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", "a", ""}
	for i, uid := range uids {
		m.Set(uid, i+1)
	}
	if m.Len() != 4 {
		t.Fatalf("Len = %d, want 4", m.Len())
	}
	for i, uid := range uids {
		if v, ok := m.Get(uid); !ok || v != i+1 {
			t.Errorf("Get(%q) = %d, %v", uid, v, ok)
		}
	}
	if _, ok := m.Get("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f1"); ok {
		t.Error("Get of an absent UID found it")
	}
	var got []string
	for uid, v := range m.All() {
		got = append(got, string(uid)+"="+string(rune('0'+v)))
		if v%2 == 0 {
			m.Delete(uid)
		}
	}
	sort.Strings(got)
	if want := "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0=2 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0=1 =4 a=3"; strings.Join(got, " ") != want {
		t.Errorf("All = %q, want %q", strings.Join(got, " "), want)
	}
	if m.Len() != 2 {
		t.Fatalf("after deleting in All: Len = %d, want 2", m.Len())
	}
	for uid := range m.All() {
		if uid != uids[0] && uid != uids[2] {
			t.Errorf("left %q", uid)
		}
	}
}

func TestMapUpdate(t *testing.T) {
	var m Map[int]
	m.Set("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", 1)
	m.Set("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f2", 2)
	m.Set("b", 3)
	m.Set("c", 4)
	m.Update(func(v int) (int, bool) { return v * 10, v%2 == 1 })
	sum := 0
	for v := range m.Values() {
		sum += v
	}
	if m.Len() != 2 || sum != 40 {
		t.Fatalf("after Update: %d values summing to %d, want 2 summing to 40", m.Len(), sum)
	}
	if v, _ := m.Get("b"); v != 30 {
		t.Fatalf("b = %d, want 30", v)
	}
}

func TestMapDeleteMissing(t *testing.T) {
	var m Map[int]
	var present Map[struct{}]
	uids := []types.UID{
		"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f1", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f2",
		"a", "b", "c",
	}
	for i, uid := range uids {
		m.Set(uid, i%3) // 0, 1, 2, 0, 1, 2
		if i%3 == 0 {
			present.Set(uid, struct{}{})
		}
	}
	var removed []string
	m.DeleteMissing(&present, func(v int) bool { return v == 1 }, func(uid types.UID, _ int) {
		removed = append(removed, string(uid))
	})
	sort.Strings(removed)
	if got := strings.Join(removed, " "); got != "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f1 b" {
		t.Fatalf("removed %q", got)
	}
	if m.Len() != 4 {
		t.Fatalf("Len = %d, want 4", m.Len())
	}
}

// TestMapAgainstGoMap runs random operations on a Map and on a plain Go map and compares them after each,
// with a small key space so that UIDs are set again, deleted and revived, and merges and compactions happen
// at every size.
func TestMapAgainstGoMap(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var m Map[int]
		ref := map[types.UID]int{}
		keys := 50 + rng.IntN(3000)
		uid := func() types.UID {
			n := rng.IntN(keys)
			if n%17 == 0 {
				return types.UID(fmt.Sprintf("odd-%d", n))
			}
			return types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", n*2654435761%(1<<32), n))
		}
		for op := range 20000 {
			switch r := rng.IntN(100); {
			case r < 55:
				u, v := uid(), rng.Int()
				m.Set(u, v)
				ref[u] = v
			case r < 85:
				u := uid()
				m.Delete(u)
				delete(ref, u)
			case r < 86:
				// Delete some entries while iterating, as the watcher's sweep does.
				for u := range m.All() {
					if rng.IntN(3) == 0 {
						m.Delete(u)
						delete(ref, u)
					}
				}
			case r < 87:
				m.Update(func(v int) (int, bool) { return v / 2, v%5 != 0 })
				for u, v := range ref {
					if v%5 == 0 {
						delete(ref, u)
					} else {
						ref[u] = v / 2
					}
				}
			case r < 88:
				var present Map[struct{}]
				for u := range ref {
					if rng.IntN(2) == 0 {
						present.Set(u, struct{}{})
					}
				}
				removed := map[types.UID]int{}
				m.DeleteMissing(&present, func(v int) bool { return v%2 == 0 }, func(u types.UID, v int) { removed[u] = v })
				for u, v := range ref {
					if _, ok := present.Get(u); !ok && v%2 == 0 {
						if removed[u] != v {
							t.Fatalf("seed %d op %d: DeleteMissing did not remove %s=%d", seed, op, u, v)
						}
						delete(removed, u)
						delete(ref, u)
					}
				}
				if len(removed) > 0 {
					t.Fatalf("seed %d op %d: DeleteMissing removed too much: %v", seed, op, removed)
				}
			default:
				u := uid()
				v, ok := m.Get(u)
				if rv, rok := ref[u]; ok != rok || v != rv {
					t.Fatalf("seed %d op %d: Get(%s) = %d, %v; want %d, %v", seed, op, u, v, ok, rv, rok)
				}
			}
			if m.Len() != len(ref) {
				t.Fatalf("seed %d op %d: Len = %d, want %d", seed, op, m.Len(), len(ref))
			}
		}
		got := maps.Collect(m.All())
		if !maps.Equal(got, ref) {
			t.Fatalf("seed %d: contents differ: %d entries, want %d", seed, len(got), len(ref))
		}
		sum, want := 0, 0
		for v := range m.Values() {
			sum += v
		}
		for _, v := range ref {
			want += v
		}
		if sum != want {
			t.Fatalf("seed %d: Values sum to %d, want %d", seed, sum, want)
		}
	}
}

// BenchmarkMapRetained reports the heap a Map keeps per entry for 16-byte values, the size of a watcher's
// digest, against a Go map keyed by the UID string.
func BenchmarkMapRetained(b *testing.B) {
	const n = 30000
	uids := make([]types.UID, n)
	for i := range uids {
		uids[i] = types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i*2654435761%(1<<32), i))
	}
	type digest [2]uint64 // the size of a watcher's digest
	b.Run("uidmap", func(b *testing.B) {
		for range b.N {
			b.ReportMetric(retained(func() any {
				var m Map[digest]
				for _, u := range uids {
					m.Set(u, digest{})
				}
				return &m
			})/n, "B/entry")
		}
	})
	b.Run("gomap", func(b *testing.B) {
		for range b.N {
			b.ReportMetric(retained(func() any {
				m := map[types.UID]digest{}
				for _, u := range uids {
					m[types.UID(string([]byte(u)))] = digest{} // a string of its own, as a decoded object's
				}
				return m
			})/n, "B/entry")
		}
	})
}

func retained(build func() any) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(x)
	return float64(after.HeapAlloc) - float64(before.HeapAlloc)
}
