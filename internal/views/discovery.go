package views

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/celaudit/celaudit/internal/vap"
)

// Discovery is the cluster's served resources as discovery last reported them. Snapshot returns the latest
// snapshot as a vap.ResourceResolver; Refresh takes a new one and tells subscribers when the served set
// changed (a CRD was installed, removed or changed versions).
type Discovery struct {
	client discovery.DiscoveryInterface

	mu       sync.RWMutex
	current  *vap.StaticResolver
	served   []vap.APIResource
	onChange []func()
}

// NewDiscovery returns an empty resolver; call Refresh before use.
func NewDiscovery(client discovery.DiscoveryInterface) *Discovery {
	empty, _ := vap.NewStaticResolver(nil)
	return &Discovery{client: client, current: empty}
}

// OnChange registers f to run after a refresh that changed the served resources.
func (d *Discovery) OnChange(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onChange = append(d.onChange, f)
}

// Refresh reads discovery. Groups whose discovery fails (an aggregated API that is down) are left out; their
// resources are then reported as not served.
func (d *Discovery) Refresh(context.Context) error {
	groups, lists, err := discovery.ServerGroupsAndResources(d.client)
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return fmt.Errorf("reading discovery: %w", err)
	}
	resolver, rerr := vap.NewResolverFromDiscovery(groups, lists)
	if rerr != nil {
		return fmt.Errorf("building resource resolver: %w", rerr)
	}
	served := resolver.ServedResources()
	d.mu.Lock()
	// The snapshot is replaced only when it changed: policies bound to it stay current.
	changed := !reflect.DeepEqual(served, d.served)
	if changed {
		d.current, d.served = resolver, served
	}
	subs := append([]func(){}, d.onChange...)
	d.mu.Unlock()
	if changed {
		for _, f := range subs {
			f()
		}
	}
	return nil
}

func (d *Discovery) resolver() *vap.StaticResolver {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.current
}

// Namespaced tells whether the served resource gvr is namespaced; known is false when it is not served.
func (d *Discovery) Namespaced(gvr schema.GroupVersionResource) (namespaced, known bool) {
	return d.resolver().Namespaced(gvr)
}

// KindFor returns the kind of the served resource gvr; empty when it is not served.
func (d *Discovery) KindFor(gvr schema.GroupVersionResource) schema.GroupVersionKind {
	return d.resolver().KindFor(gvr, "")
}

// Snapshot returns the current discovery snapshot: policies are bound against one snapshot and bound again
// when it changes, so one evaluation never mixes two views of the cluster.
func (d *Discovery) Snapshot() *vap.StaticResolver { return d.resolver() }

// Refresher keeps a Discovery current: it refreshes soon after Trigger (coalescing bursts, such as a CRD
// install and its status updates) and every Interval, for aggregated APIs that come and go.
type Refresher struct {
	Discovery *Discovery
	Interval  time.Duration
	Delay     time.Duration
	// Log receives failed refreshes; the logger of Start's context when unset.
	Log     logr.Logger
	trigger chan struct{}
	once    sync.Once
}

func (r *Refresher) init() {
	r.once.Do(func() { r.trigger = make(chan struct{}, 1) })
}

// Trigger asks for a refresh; it never blocks.
func (r *Refresher) Trigger() {
	r.init()
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Start refreshes until ctx is done.
func (r *Refresher) Start(ctx context.Context) error {
	r.init()
	log := r.Log
	if log.GetSink() == nil {
		log = logr.FromContextOrDiscard(ctx).WithName("discovery")
	}
	tick := time.NewTicker(r.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-r.trigger:
			sleepCtx(ctx, r.Delay)
		}
		if err := r.Discovery.Refresh(ctx); err != nil {
			log.Error(err, "Refreshing discovery failed")
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
