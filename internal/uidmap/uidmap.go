package uidmap

import (
	"bytes"
	"iter"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// Key is a canonical UUID in binary form.
type Key [16]byte

const hexDigits = "0123456789abcdef"

// Pack returns the binary form of uid when uid is a canonical UUID: 36 characters, lowercase hexadecimal,
// hyphens after the 8th, 12th, 16th and 20th digit. Only those are packed, so that String gives back
// exactly the UID that was packed.
func Pack(uid types.UID) (Key, bool) {
	var k Key
	if len(uid) != 36 {
		return k, false
	}
	j := 0
	for i := 0; i < 36; {
		switch i {
		case 8, 13, 18, 23:
			if uid[i] != '-' {
				return k, false
			}
			i++
			continue
		}
		hi, ok1 := nibble(uid[i])
		lo, ok2 := nibble(uid[i+1])
		if !ok1 || !ok2 {
			return k, false
		}
		k[j] = hi<<4 | lo
		j++
		i += 2
	}
	return k, true
}

func nibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// UID returns the canonical UUID k stands for.
func (k Key) UID() types.UID {
	var b [36]byte
	j := 0
	for i, x := range k {
		switch i {
		case 4, 6, 8, 10:
			b[j] = '-'
			j++
		}
		b[j] = hexDigits[x>>4]
		b[j+1] = hexDigits[x&0xf]
		j += 2
	}
	return types.UID(b[:])
}

// Map is a map from UID to V. The zero value is an empty map ready to use. It is not safe for concurrent use.
//
// Canonical UIDs live in a slice sorted by key, 16 bytes of key next to each value with no per-entry
// overhead, where a Go map would spend about as much again on empty slots and control bytes. New UIDs wait
// in a small map until it holds an eighth as many as the slice, then are merged in, so a run of inserts
// costs O(log n) each, amortized. Deleted UIDs are marked and dropped at the next merge.
type Map[V any] struct {
	sorted  []slot[V]
	dead    []uint64 // bit i: sorted[i] is deleted
	ndead   int
	recent  map[Key]V       // canonical UIDs not in sorted
	other   map[types.UID]V // UIDs that are not canonical UUIDs: kept whole
	ranging int             // iterations under way: sorted must not move under them
}

type slot[V any] struct {
	k Key
	v V
}

// minRecent is the least number of new UIDs that triggers a merge.
const minRecent = 64

func (m *Map[V]) find(k Key) (int, bool) {
	i, found := slices.BinarySearchFunc(m.sorted, k, func(s slot[V], k Key) int { return bytes.Compare(s.k[:], k[:]) })
	return i, found
}

func (m *Map[V]) isDead(i int) bool { return m.dead[i/64]&(1<<(i%64)) != 0 }

// Get returns the value of uid and whether it is present.
func (m *Map[V]) Get(uid types.UID) (V, bool) {
	k, ok := Pack(uid)
	if !ok {
		v, found := m.other[uid]
		return v, found
	}
	if i, found := m.find(k); found {
		if m.isDead(i) {
			var zero V
			return zero, false
		}
		return m.sorted[i].v, true
	}
	v, found := m.recent[k]
	return v, found
}

// Set sets the value of uid.
func (m *Map[V]) Set(uid types.UID, v V) {
	k, ok := Pack(uid)
	if !ok {
		if m.other == nil {
			m.other = map[types.UID]V{}
		}
		m.other[uid] = v
		return
	}
	if i, found := m.find(k); found {
		if m.isDead(i) {
			m.dead[i/64] &^= 1 << (i % 64)
			m.ndead--
		}
		m.sorted[i].v = v
		return
	}
	if m.recent == nil {
		m.recent = map[Key]V{}
	}
	m.recent[k] = v
	if len(m.recent) >= max(minRecent, len(m.sorted)/8) {
		m.merge()
	}
}

// Delete removes uid.
func (m *Map[V]) Delete(uid types.UID) {
	k, ok := Pack(uid)
	if !ok {
		delete(m.other, uid)
		return
	}
	if i, found := m.find(k); found {
		m.deleteAt(i)
		return
	}
	delete(m.recent, k)
}

func (m *Map[V]) deleteAt(i int) {
	if m.isDead(i) {
		return
	}
	m.markDead(i)
	m.compactIfSparse()
}

// merge rebuilds sorted from its live entries and recent, at exactly the size it needs.
func (m *Map[V]) merge() {
	add := make([]slot[V], 0, len(m.recent))
	for k, v := range m.recent {
		add = append(add, slot[V]{k: k, v: v})
	}
	slices.SortFunc(add, func(a, b slot[V]) int { return bytes.Compare(a.k[:], b.k[:]) })
	out := make([]slot[V], 0, len(m.sorted)-m.ndead+len(add))
	j := 0
	for i := range m.sorted {
		if m.isDead(i) {
			continue
		}
		for j < len(add) && bytes.Compare(add[j].k[:], m.sorted[i].k[:]) < 0 {
			out = append(out, add[j])
			j++
		}
		out = append(out, m.sorted[i])
	}
	out = append(out, add[j:]...)
	m.sorted = out
	m.dead = make([]uint64, (len(out)+63)/64)
	m.ndead = 0
	m.recent = nil
}

// Len returns the number of UIDs in the map.
func (m *Map[V]) Len() int { return len(m.sorted) - m.ndead + len(m.recent) + len(m.other) }

// Values yields every value, in no particular order. Unlike All, it formats no UID: metrics count every
// object's results on each scrape.
func (m *Map[V]) Values() iter.Seq[V] {
	return func(yield func(V) bool) {
		for i := range m.sorted {
			if !m.isDead(i) && !yield(m.sorted[i].v) {
				return
			}
		}
		for _, v := range m.recent {
			if !yield(v) {
				return
			}
		}
		for _, v := range m.other {
			if !yield(v) {
				return
			}
		}
	}
}

// Update replaces every value with f's result, and removes those for which f returns false. Unlike
// iterating with All, it formats no UID.
func (m *Map[V]) Update(f func(V) (V, bool)) {
	for i := range m.sorted {
		if m.isDead(i) {
			continue
		}
		if next, keep := f(m.sorted[i].v); keep {
			m.sorted[i].v = next
		} else {
			m.markDead(i)
		}
	}
	for k, v := range m.recent {
		if next, keep := f(v); keep {
			m.recent[k] = next
		} else {
			delete(m.recent, k)
		}
	}
	for uid, v := range m.other {
		if next, keep := f(v); keep {
			m.other[uid] = next
		} else {
			delete(m.other, uid)
		}
	}
	m.compactIfSparse()
}

// markDead deletes sorted[i] without compacting, for loops over sorted.
func (m *Map[V]) markDead(i int) {
	m.dead[i/64] |= 1 << (i % 64)
	m.ndead++
	var zero V
	m.sorted[i].v = zero // release what the value points to
}

func (m *Map[V]) compactIfSparse() {
	if m.ranging == 0 && m.ndead > minRecent && m.ndead >= len(m.sorted)/4 {
		m.merge()
	}
}

// DeleteMissing removes every UID that is not in present and whose value match accepts, calling removed
// with each. Only removed UIDs are formatted.
func (m *Map[V]) DeleteMissing(present *Map[struct{}], match func(V) bool, removed func(types.UID, V)) {
	has := func(k Key) bool {
		if i, found := present.find(k); found && !present.isDead(i) {
			return true
		}
		_, ok := present.recent[k]
		return ok
	}
	for i := range m.sorted {
		if m.isDead(i) || has(m.sorted[i].k) || !match(m.sorted[i].v) {
			continue
		}
		v := m.sorted[i].v
		m.markDead(i)
		removed(m.sorted[i].k.UID(), v)
	}
	for k, v := range m.recent {
		if has(k) || !match(v) {
			continue
		}
		delete(m.recent, k)
		removed(k.UID(), v)
	}
	for uid, v := range m.other {
		if _, ok := present.other[uid]; ok || !match(v) {
			continue
		}
		delete(m.other, uid)
		removed(uid, v)
	}
	m.compactIfSparse()
}

// All yields every UID and its value, in no particular order. The body may delete the UID it is given, and
// nothing else.
func (m *Map[V]) All() iter.Seq2[types.UID, V] {
	return func(yield func(types.UID, V) bool) {
		m.ranging++
		defer func() {
			m.ranging--
			m.compactIfSparse()
		}()
		for i := range m.sorted {
			if m.isDead(i) {
				continue
			}
			if !yield(m.sorted[i].k.UID(), m.sorted[i].v) {
				return
			}
		}
		for k, v := range m.recent {
			if !yield(k.UID(), v) {
				return
			}
		}
		for uid, v := range m.other {
			if !yield(uid, v) {
				return
			}
		}
	}
}
