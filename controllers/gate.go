package controllers

import "sync"

// Gate tracks the sources of policies that have not yet registered everything the cluster held at start-up.
// Reports are written only once every source is done, so a restart never publishes a half-built report.
type Gate struct {
	mu      sync.Mutex
	pending map[string]bool
	onOpen  []func()
}

// OnOpen registers f to run once, when the last source is done.
func (g *Gate) OnOpen(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) == 0 {
		f()
		return
	}
	g.onOpen = append(g.onOpen, f)
}

// NewGate returns a gate waiting for the named sources.
func NewGate(sources ...string) *Gate {
	g := &Gate{pending: map[string]bool{}}
	for _, s := range sources {
		g.pending[s] = true
	}
	return g
}

// Done marks a source as having registered its initial policies.
func (g *Gate) Done(source string) {
	g.mu.Lock()
	delete(g.pending, source)
	var run []func()
	if len(g.pending) == 0 {
		run, g.onOpen = g.onOpen, nil
	}
	g.mu.Unlock()
	for _, f := range run {
		f()
	}
}

// Open reports whether every source is done.
func (g *Gate) Open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending) == 0
}
