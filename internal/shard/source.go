package shard

import (
	"slices"
	"sync"
)

// Source tells a member its current layout, and who needs to know when it changes.
type Source interface {
	// Layout returns the member's current layout; false while it is not known yet (its StatefulSet not read).
	Layout() (Layout, bool)
	// Subscribe registers fn, called with each new layout after it changes (never under a lock of the Source).
	Subscribe(fn func(Layout))
}

// Static returns the Source of a layout that never changes (the --shard-index and --shard-count flags, or none).
func Static(l Layout) Source { return static{l} }

type static struct{ l Layout }

func (s static) Layout() (Layout, bool) { return s.l, true }
func (static) Subscribe(func(Layout))   {}

// Dynamic is a Source whose layout is set by its owner (the membership watch). The zero value knows no layout.
type Dynamic struct {
	mu    sync.Mutex
	l     Layout
	known bool
	subs  []func(Layout)
}

// Layout implements Source.
func (d *Dynamic) Layout() (Layout, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.l, d.known
}

// Subscribe implements Source.
func (d *Dynamic) Subscribe(fn func(Layout)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.subs = append(d.subs, fn)
}

// Set records l and tells the subscribers when it differs from the layout known before.
func (d *Dynamic) Set(l Layout) {
	d.mu.Lock()
	changed := !d.known || d.l != l
	d.l, d.known = l, true
	subs := slices.Clone(d.subs)
	d.mu.Unlock()
	if changed {
		for _, fn := range subs {
			fn(l)
		}
	}
}
