package audit

import (
	"context"
	"sync"
)

// ObjectCache holds what several policies compute once for the object they are evaluated on together: the
// MutatingAdmissionPolicies of a cluster are run on an object as one chain (their order and reinvocation
// decide each one's change), and each policy's result is read from that one run. A front end makes one
// ObjectCache per object evaluation (engine.Object does), so that nothing computed for one evaluation is
// ever served to the next: a policy's params or a namespace may have changed in between.
//
// It is safe for concurrent use; a value computed twice by concurrent evaluations is stored once.
type ObjectCache struct {
	mu     sync.Mutex
	values map[any]any
}

// Get returns the value stored under key, or compute's value, which it stores. compute runs outside the
// lock.
func (c *ObjectCache) Get(key any, compute func() any) any {
	if c == nil {
		return compute()
	}
	c.mu.Lock()
	v, ok := c.values[key]
	c.mu.Unlock()
	if ok {
		return v
	}
	v = compute()
	c.mu.Lock()
	defer c.mu.Unlock()
	if prior, ok := c.values[key]; ok {
		return prior
	}
	if c.values == nil {
		c.values = map[any]any{}
	}
	c.values[key] = v
	return v
}

type objectCacheKey struct{}

// WithObjectCache returns ctx carrying c.
func WithObjectCache(ctx context.Context, c *ObjectCache) context.Context {
	return context.WithValue(ctx, objectCacheKey{}, c)
}

// ObjectCacheFrom returns the ObjectCache ctx carries, nil when none (Get then computes every time).
func ObjectCacheFrom(ctx context.Context) *ObjectCache {
	c, _ := ctx.Value(objectCacheKey{}).(*ObjectCache)
	return c
}
