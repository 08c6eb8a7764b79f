package controllers

import "sync"

// Gate tracks the sources of policies that have not yet registered everything the cluster held at start-up.
// Reports are written only once every source is done, so a restart never publishes a half-built report.
type Gate struct {
	mu      sync.Mutex
	pending map[string]bool
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
	defer g.mu.Unlock()
	delete(g.pending, source)
}

// Open reports whether every source is done.
func (g *Gate) Open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending) == 0
}
