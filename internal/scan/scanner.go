package scan

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/shard"
)

// Sink receives the results of evaluations. *results.Store implements it.
type Sink interface {
	Set(policy audit.PolicyKey, obj results.ObjectKey, namespace string, res []audit.Result) bool
	DeleteObject(obj results.ObjectKey, namespace string)
	DeletePolicy(policy audit.PolicyKey, gvr schema.GroupVersionResource)
}

var _ Sink = &results.Store{}

// Options tune the scanner.
type Options struct {
	// PageSize is the limit of each LIST page.
	PageSize int64
	// Workers evaluate the objects of a page in parallel; default the CPU count.
	Workers int
	// WatchTimeout bounds each WATCH call; it is renewed from the last bookmark.
	WatchTimeout time.Duration
	// Backoff is the wait after a failed LIST or WATCH. It doubles with each further failure in a row, up to
	// MaxBackoff, so that a resource that cannot be read (forbidden, served by an aggregated API that is down,
	// without watch support) costs the API server a few requests an hour rather than one every Backoff.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Namespaced tells whether a resource is namespaced; known is false when it cannot tell. A rescan within
	// one namespace (after a namespace's labels or a param changed) reads namespaced resources in that
	// namespace, of cluster-scoped resources only the Namespace of that name, and a resource of unknown scope
	// whole.
	Namespaced func(gvr schema.GroupVersionResource) (namespaced, known bool)
	// KindFor, when set, returns the kind of a served resource (empty when it is not served): the error
	// result of a resource that cannot be read names it.
	KindFor func(gvr schema.GroupVersionResource) schema.GroupVersionKind
	// PagesInFlight bounds the LIST pages held in memory at once across all resources, which bounds the
	// operator's peak memory while it reads; default Workers, at least 2.
	PagesInFlight int
	// Released starts the scanner released (see Scanner.Release).
	Released bool
	// OnReadError, when set, is told about resources that cannot be read (for example a forbidden LIST) and
	// the keys of the policies covering them, so that the caller can tell users where they look. It is called
	// when the error first occurs and again each time its text changes, not on every retry, and with a nil
	// error once the resource is readable again.
	OnReadError func(gvr schema.GroupVersionResource, policies []audit.PolicyKey, err error)
	// ForbiddenHint, when set, says how to grant read access to a resource whose LIST is forbidden: the
	// error result and OnReadError's error name the missing verbs, API group and resource, then this hint.
	ForbiddenHint string
	// Withheld maps resources that are never read to why, a sentence that also says how to have them read. A
	// policy covering one gets, instead of results about its objects, one skip result about the resource
	// saying so; no LIST or WATCH of it is ever made. celaudit withholds Secrets unless asked to audit them: a
	// verdict is one bit about the object it judges, and whoever can read it learns that bit.
	Withheld map[schema.GroupVersionResource]string
	// OnSettled, when set, is called when the scanner becomes synced (see Scanner.Synced): a read ends, or a
	// watcher stops, and every watcher is then idle. It is called without the scanner's locks held, and may be
	// called more than once for one settling (reads that end together, a watcher woken with nothing to read).
	OnSettled func()
	// OnShardMode, when set, is told how a resource is read when that changes (see ShardMode): whether the
	// API server applies the member's shard selector or the member filters what it receives.
	OnShardMode func(gvr schema.GroupVersionResource, mode ShardMode)
}

func (o *Options) defaults() {
	if o.PageSize <= 0 {
		o.PageSize = 500
	}
	if o.Workers <= 0 {
		o.Workers = runtime.NumCPU()
	}
	if o.PagesInFlight <= 0 {
		o.PagesInFlight = max(o.Workers, 2)
	}
	if o.WatchTimeout <= 0 {
		o.WatchTimeout = 10 * time.Minute
	}
	if o.Backoff <= 0 {
		o.Backoff = 2 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Minute
	}
	o.MaxBackoff = max(o.MaxBackoff, o.Backoff)
}

// Scanner runs the watchers of every resource some policy covers.
type Scanner struct {
	client Client
	sink   Sink
	opts   Options
	log    logr.Logger

	// sleep waits between retries; tests replace it to observe the backoff without waiting.
	sleep func(ctx context.Context, d time.Duration)

	pages    chan struct{} // one token per LIST page being read or evaluated
	released chan struct{} // closed by Release: watchers start reading
	release  sync.Once

	mu  sync.Mutex
	ctx context.Context
	// live orders result writes with policy changes: changes of policies take it (after mu) to write, result
	// writes to read, so that a result computed by a policy that was replaced or removed meanwhile is dropped
	// rather than stored after its policy's results were deleted.
	live     sync.RWMutex
	policies map[audit.PolicyKey]audit.Policy
	// index is the registered policies by the resources they cover. A change builds the next index before
	// it takes live and swaps it in under mu and live: readers load it without waiting.
	index atomic.Pointer[engine.Set]
	// view is the member's layout and its generation, changed under mu and live (see SetShard) and read
	// under live: a result read under an earlier generation is dropped rather than stored (see evaluate).
	view     shardView
	watchers map[schema.GroupVersionResource]*watcher
	wg       sync.WaitGroup

	// panicked holds, by policy, the last panic whose stack was logged: a policy that panics on every object
	// logs its stack once, not once per object. A change of the policy forgets it.
	panicMu  sync.Mutex
	panicked map[audit.PolicyKey]string
}

// NewScanner returns a scanner that reads with client and writes results to sink. Call Start to run it.
func NewScanner(client Client, sink Sink, log logr.Logger, opts Options) *Scanner {
	opts.defaults()
	s := &Scanner{
		client:   client,
		sink:     sink,
		opts:     opts,
		log:      log,
		sleep:    sleep,
		pages:    make(chan struct{}, opts.PagesInFlight),
		released: make(chan struct{}),
		policies: map[audit.PolicyKey]audit.Policy{},
		watchers: map[schema.GroupVersionResource]*watcher{},
		panicked: map[audit.PolicyKey]string{},
	}
	s.index.Store(engine.NewSet())
	s.view = newShardView(shard.Layout{}, 0)
	if opts.Released {
		s.Release()
	}
	return s
}

// Release lets watchers start reading. Until then policies are only registered, so that a start-up that
// registers many policies over the same resources reads each resource once, with all of them, rather than
// once per policy. Options.Released makes the scanner start released.
func (s *Scanner) Release() { s.release.Do(func() { close(s.released) }) }

// Start runs the scanner until ctx is done. Policies set before Start begin scanning when it is called.
func (s *Scanner) Start(ctx context.Context) error {
	s.mu.Lock()
	s.ctx = audit.WithPanicHandler(ctx, s.recovered)
	for _, w := range s.watchers {
		s.startLocked(w)
	}
	s.mu.Unlock()
	<-ctx.Done()
	s.wg.Wait()
	return nil
}

// SetPolicy adds or replaces a policy and rescans the objects it covers, evaluating only this policy on
// objects that did not change since they were last read.
func (s *Scanner) SetPolicy(p audit.Policy) { s.setPolicy(p, true) }

// ReplacePolicy swaps in a policy whose evaluation is unchanged but whose resources may differ (it was bound
// again after discovery changed): only resources it did not cover before are scanned, and its results on
// resources it no longer covers are dropped.
func (s *Scanner) ReplacePolicy(p audit.Policy) { s.setPolicy(p, false) }

func (s *Scanner) setPolicy(p audit.Policy, rescan bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := p.Key()
	next := s.index.Load().With(p)
	s.live.Lock()
	defer s.live.Unlock()
	old := s.policies[key]
	s.policies[key] = p
	s.index.Store(next)
	s.forgetPanic(key)
	want := map[schema.GroupVersionResource]bool{}
	for _, gvr := range p.Resources() {
		want[gvr] = true
	}
	had := map[schema.GroupVersionResource]bool{}
	if old != nil {
		for _, gvr := range old.Resources() {
			had[gvr] = true
			if !want[gvr] {
				s.sink.DeletePolicy(key, gvr)
				s.releaseLocked(gvr)
			}
		}
	}
	for gvr := range want {
		if reason, withheld := s.opts.Withheld[gvr]; withheld {
			// Set on every change of the policy, whose category and severity the result carries.
			msg := fmt.Sprintf("not audited (%s): %s", ResourceString(gvr), reason)
			s.sink.Set(key, results.ObjectKey{GVR: gvr}, "", []audit.Result{resourceResult(p, gvr, s.kindOf(gvr), audit.Skip, msg)})
			continue
		}
		w := s.watchers[gvr]
		if w == nil {
			w = newWatcher(s, gvr)
			s.watchers[gvr] = w
			s.startLocked(w)
		}
		if rescan || !had[gvr] {
			w.requestRescan(key, "")
		}
	}
}

// SetShard sets the member's layout. Every LIST and WATCH then asks for the objects of the namespaces the
// layout owns only: with the KEP-5866 shardSelector, and with the same hash on the client where the API
// server does not honour it. A change relists every resource under the new layout, which drops the results of
// the objects no longer owned and reads the newly owned ones, then restarts its watch; a result read under the
// old layout that is not stored by the time SetShard returns is never stored. A change of epoch alone reads
// nothing again: the objects owned are the same. It may be called before Start and at any time after; the
// zero Layout reads everything, and a Layout that owns nothing (None) reads nothing: every watch ends, no
// LIST or WATCH is sent and every result is dropped until a layout gives the member a range again.
func (s *Scanner) SetShard(l shard.Layout) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live.Lock()
	old := s.view
	s.view.layout = l
	same := sameOwnership(old.layout, l)
	if !same {
		s.view = newShardView(l, old.gen+1)
	}
	s.live.Unlock()
	if same {
		return
	}
	s.log.Info("Shard layout changed: relisting every resource", "from", old.layout.String(), "to", l.String(),
		"shardSelector", s.view.selector)
	for _, w := range s.watchers {
		w.requestRelist()
	}
}

// currentView returns the layout reads are made under now.
func (s *Scanner) currentView() shardView {
	s.live.RLock()
	defer s.live.RUnlock()
	return s.view
}

// RemovePolicy removes a policy and every result it produced.
func (s *Scanner) RemovePolicy(key audit.PolicyKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.policies[key]
	if p == nil {
		return
	}
	next := s.index.Load().Without(key)
	s.live.Lock()
	defer s.live.Unlock()
	delete(s.policies, key)
	s.index.Store(next)
	s.forgetPanic(key)
	s.sink.DeletePolicy(key, schema.GroupVersionResource{})
	for _, gvr := range p.Resources() {
		s.releaseLocked(gvr)
	}
}

// Rescan re-evaluates one policy on the objects of its resources. It is how a change outside the object (a
// param, a namespace label, an on-demand rescan) reaches the results.
//
// A namespace narrows the rescan to what a change of that namespace concerns: the objects in it, and the
// Namespace object of that name, whose admission request carries its own name as namespace (so a
// namespaceSelector and namespace-scoped params apply to it). Other cluster-scoped objects are in no
// namespace and are left alone.
func (s *Scanner) Rescan(key audit.PolicyKey, namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.policies[key]
	if p == nil {
		return
	}
	for _, gvr := range p.Resources() {
		w := s.watchers[gvr]
		if w == nil {
			continue
		}
		// Of a sharded audit, a member rescans the namespace if it owns it, and its Namespace object, which
		// is cluster-scoped, if it owns the cluster-scoped objects.
		switch namespaced, known := s.namespaced(gvr); {
		case namespace == "", !known:
			w.requestRescan(key, "")
		case namespaced && s.owns(namespace), isNamespaces(gvr) && s.owns(""):
			w.requestRescan(key, namespace)
		}
	}
}

// owns reports whether the member's layout owns the objects of namespace ("" for cluster-scoped ones).
func (s *Scanner) owns(namespace string) bool {
	return s.currentView().layout.OwnsNamespace(namespace)
}

// namespaced tells whether gvr is namespaced, and whether that is known.
func (s *Scanner) namespaced(gvr schema.GroupVersionResource) (namespaced, known bool) {
	if isNamespaces(gvr) {
		return false, true
	}
	if s.opts.Namespaced == nil {
		return false, false
	}
	return s.opts.Namespaced(gvr)
}

// kindOf is the kind of resource gvr, "" when discovery does not tell.
func (s *Scanner) kindOf(gvr schema.GroupVersionResource) string {
	if f := s.opts.KindFor; f != nil {
		return f(gvr).Kind
	}
	return ""
}

// isNamespaces reports whether gvr is the core Namespace resource.
func isNamespaces(gvr schema.GroupVersionResource) bool {
	return gvr.Group == "" && gvr.Resource == "namespaces"
}

// Synced reports whether every watcher has read its resource once and has no rescan pending, i.e. whether
// the results reflect every object under every registered policy.
func (s *Scanner) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.watchers {
		if !w.idle() {
			return false
		}
	}
	return true
}

// settled calls Options.OnSettled if the scanner is synced. The caller holds none of the scanner's locks.
func (s *Scanner) settled() {
	if s.opts.OnSettled != nil && s.Synced() {
		s.opts.OnSettled()
	}
}

// policiesFor returns the policies covering gvr, sorted by key, restricted to keys when keys is not nil. It
// runs for every watch event, so it reads the index rather than asking every policy for its resources. The
// unrestricted slice is shared: callers must not modify it.
func (s *Scanner) policiesFor(gvr schema.GroupVersionResource, keys policySet) []audit.Policy {
	all := s.index.Load().For(gvr)
	if keys == nil {
		return all
	}
	var out []audit.Policy
	for _, p := range all {
		if keys[p.Key()] {
			out = append(out, p)
		}
	}
	return out
}

func (s *Scanner) startLocked(w *watcher) {
	if s.ctx == nil || w.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	w.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		w.run(ctx)
		if !w.idle() { // it stopped with a read to do: the others may be synced
			s.settled()
		}
	}()
}

// releaseLocked stops the watcher of gvr when no policy covers it any more.
func (s *Scanner) releaseLocked(gvr schema.GroupVersionResource) {
	if len(s.index.Load().For(gvr)) > 0 {
		return
	}
	if w := s.watchers[gvr]; w != nil {
		delete(s.watchers, gvr)
		if w.cancel != nil {
			w.cancel()
		}
	}
}

// evaluate runs policies on obj, through the one evaluation path every front end shares, and hands the
// results to the sink. obj was read under the layout generation gen: if the layout changed since, its results
// are dropped and evaluate returns false, and the caller forgets the object, so that the relist the change
// called for evaluates it anew if it is still owned.
func (s *Scanner) evaluate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, policies []audit.Policy,
	gen uint64) bool {
	key := results.ObjectKey{GVR: gvr, UID: obj.GetUID()}
	o := engine.NewObject(gvr, obj)
	for _, p := range policies {
		res := o.Evaluate(ctx, p) // outside the lock: a policy change never waits for an evaluation
		s.live.RLock()
		current := s.view.gen == gen
		if current && s.covers(p.Key(), gvr) {
			s.sink.Set(p.Key(), key, obj.GetNamespace(), res)
		}
		s.live.RUnlock()
		if !current {
			return false
		}
	}
	return true
}

// recovered logs a panic an evaluation recovered into an error result of the object (see audit.Recovered):
// with its stack the first time the policy panics so, at V(1) afterwards, so that a policy that panics on a
// million objects writes one stack to the log, and the audit of the other objects goes on.
func (s *Scanner) recovered(policy audit.PolicyKey, obj audit.ObjectRef, value any, stack []byte) {
	msg := fmt.Sprint(value)
	s.panicMu.Lock()
	first := s.panicked[policy] != msg
	s.panicked[policy] = msg
	s.panicMu.Unlock()
	log := s.log.WithValues("policy", policy.String(), "object", objectString(obj))
	if !first {
		log.V(1).Info("Evaluating a policy panicked again; the object gets an error result", "panic", msg)
		return
	}
	log.Error(fmt.Errorf("panic: %s", msg), "Evaluating a policy panicked; the object gets an error result and the audit goes on. "+
		"Later panics of this policy are logged at verbosity 1 without their stack", "stack", string(stack))
}

// forgetPanic forgets the panic logged for policy, which changed: its next one is logged with its stack.
func (s *Scanner) forgetPanic(policy audit.PolicyKey) {
	s.panicMu.Lock()
	delete(s.panicked, policy)
	s.panicMu.Unlock()
}

// objectString names obj in the log: kind namespace/name.
func objectString(obj audit.ObjectRef) string {
	name := obj.Name
	if obj.Namespace != "" {
		name = obj.Namespace + "/" + name
	}
	return obj.APIVersion + " " + obj.Kind + " " + name
}

// covers reports whether the policy registered under key covers gvr. A policy replaced by one that covers
// gvr too keeps its results (a rescan, when one is due, overwrites them); a removed policy, or one that no
// longer covers gvr, has had its results deleted and must not get them back. The caller holds live.
func (s *Scanner) covers(key audit.PolicyKey, gvr schema.GroupVersionResource) bool {
	return s.index.Load().Covers(key, gvr)
}

// policySet is a set of policy keys.
type policySet = map[audit.PolicyKey]bool

func policyStrings(keys []audit.PolicyKey) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.String()
	}
	return out
}

func (s *Scanner) deleteObject(gvr schema.GroupVersionResource, uid types.UID, namespace string) {
	s.sink.DeleteObject(results.ObjectKey{GVR: gvr, UID: uid}, namespace)
}
