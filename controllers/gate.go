package controllers

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/audit"
)

// startupGate opens once every policy the cluster held at start-up is registered, so that a restart never
// publishes a half-built report and each audited resource is read once, with all its policies. Each source
// of policies lists what its synced cache holds (Listed); the gate opens once each of those has been through
// a reconcile (Reconciled), whatever its outcome: a policy that fails to register is retried later and must
// not hold back every report.
type startupGate struct {
	mu      sync.Mutex
	sources map[audit.PolicySource]*sourceStartup
	onOpen  []func()
}

// sourceStartup is what one source still has to register.
type sourceStartup struct {
	listed     bool
	pending    sets.Set[string] // listed, not yet reconciled
	reconciled sets.Set[string] // reconciled before the source was listed
}

// newStartupGate returns a gate waiting for the named sources.
func newStartupGate(sources ...audit.PolicySource) *startupGate {
	g := &startupGate{sources: map[audit.PolicySource]*sourceStartup{}}
	for _, s := range sources {
		g.sources[s] = &sourceStartup{pending: sets.New[string](), reconciled: sets.New[string]()}
	}
	return g
}

// OnOpen registers f to run once, when the gate opens; at once when it is open.
func (g *startupGate) OnOpen(f func()) {
	g.mu.Lock()
	if !g.openLocked() {
		g.onOpen = append(g.onOpen, f)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	f()
}

// Listed records the names of the source's policies the cluster held at start-up.
func (g *startupGate) Listed(source audit.PolicySource, names []string) {
	g.update(func() {
		s := g.sources[source]
		if s == nil || s.listed {
			return
		}
		s.listed = true
		s.pending = sets.New(names...).Difference(s.reconciled)
		s.reconciled = nil
	})
}

// ListFrom lists the policy objects of source with c (the manager's synced cache), into list, and passes their
// names to Listed: the start-up listing every policy reconciler does once its cache has synced.
func (g *startupGate) ListFrom(ctx context.Context, c client.Reader, source audit.PolicySource, list client.ObjectList) error {
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("listing %s objects: %w", source.Kind(), err)
	}
	names := make([]string, 0, meta.LenList(list))
	if err := meta.EachListItem(list, func(o runtime.Object) error {
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		names = append(names, m.GetName())
		return nil
	}); err != nil {
		return fmt.Errorf("listing %s objects: %w", source.Kind(), err)
	}
	g.Listed(source, names)
	return nil
}

// Reconciled records that a policy went through a reconcile.
func (g *startupGate) Reconciled(key audit.PolicyKey) {
	g.update(func() {
		s := g.sources[key.Source]
		switch {
		case s == nil:
		case s.listed:
			s.pending.Delete(key.Name)
		default:
			s.reconciled.Insert(key.Name)
		}
	})
}

// update runs change under the lock, then the OnOpen functions if the gate opened.
func (g *startupGate) update(change func()) {
	g.mu.Lock()
	if g.openLocked() {
		g.mu.Unlock()
		return
	}
	change()
	var run []func()
	if g.openLocked() {
		run, g.onOpen = g.onOpen, nil
	}
	g.mu.Unlock()
	for _, f := range run {
		f()
	}
}

// Open reports whether every source has registered its start-up policies.
func (g *startupGate) Open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.openLocked()
}

func (g *startupGate) openLocked() bool {
	for _, s := range g.sources {
		if !s.listed || s.pending.Len() > 0 {
			return false
		}
	}
	return true
}
