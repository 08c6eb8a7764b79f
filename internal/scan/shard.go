package scan

import (
	"sync"

	apisharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/celaudit/celaudit/internal/listjson"
	"github.com/celaudit/celaudit/internal/shard"
)

// ShardMode says how a member of a sharded audit reads only its own objects of a resource.
type ShardMode string

const (
	// ShardNone: the audit is not sharded, every object is read.
	ShardNone ShardMode = ""
	// ShardServer: the API server applies the shardSelector (feature ShardedListAndWatch); the member
	// receives its own objects only.
	ShardServer ShardMode = "server"
	// ShardClient: the API server ignores the shardSelector; the member receives every object and keeps its
	// own, with the same hash.
	ShardClient ShardMode = "client"
)

// shardView is the layout a read is made under: its selector, sent with every LIST and WATCH and applied on
// the client where the API server does not, and the generation of the layout, which the results of the read
// must still have when they are stored.
type shardView struct {
	layout   shard.Layout
	gen      uint64
	sel      apisharding.Selector
	selector string // sel's wire form; "" when the layout owns everything, or nothing
}

func newShardView(l shard.Layout, gen uint64) shardView {
	if l.None {
		// No read at all (see readsNothing): the empty range of a layout that owns nothing is no valid
		// shardSelector, which the API server would refuse.
		return shardView{layout: l, gen: gen}
	}
	sel := l.Selector()
	return shardView{layout: l, gen: gen, sel: sel, selector: sel.String()}
}

// readsNothing reports whether the view is of a member that owns nothing (a StatefulSet's pod being scaled
// away): it neither lists nor watches, and keeps no results.
func (v shardView) readsNothing() bool { return v.layout.None }

// sharded reports whether the view reads a part of the objects only.
func (v shardView) sharded() bool { return v.selector != "" }

// sameOwnership reports whether two layouts own the same objects: they differ in epoch at most.
func sameOwnership(a, b shard.Layout) bool {
	a.Epoch, b.Epoch = 0, 0
	return a == b
}

// shardPage leaves on a LIST page read under view the objects of the view's namespaces only. A page the API
// server filtered, which it says by echoing the selector sent in metadata.shardInfo, is kept whole; any other
// is filtered here with the same selector. Only items are dropped: the page's continue token,
// remainingItemCount and resourceVersion stay as sent, so that a page filtered down to nothing still leads to
// the next one. Each page is judged by itself: the API servers of one cluster may differ in the feature
// while they are upgraded, and the pages of one list may come from different ones.
func (w *watcher) shardPage(page *listjson.Page, view shardView) error {
	if !view.sharded() {
		w.setShardMode(ShardNone)
		return nil
	}
	if page.ShardSelector() == view.selector {
		w.setShardMode(ShardServer)
		return nil
	}
	w.setShardMode(ShardClient)
	return page.Keep(func(i int) (bool, error) {
		meta, err := page.ItemMeta(i)
		if err != nil {
			return false, err
		}
		return view.sel.Matches(meta)
	})
}

// setShardMode records how the resource is read, and logs and reports it when it changes.
func (w *watcher) setShardMode(m ShardMode) {
	w.mu.Lock()
	old := w.shardMode
	w.shardMode = m
	w.mu.Unlock()
	if old == m {
		return
	}
	log := w.scanner.log.WithValues("resource", w.gvr.String())
	switch m {
	case ShardServer:
		log.Info("The API server applies the shard selector: this member receives its own objects only")
	case ShardClient:
		log.Info("The API server does not apply the shard selector (feature ShardedListAndWatch off): " +
			"this member receives every object and keeps its own")
	default:
		log.Info("Reading every object: the audit is not sharded")
	}
	if f := w.scanner.opts.OnShardMode; f != nil {
		f(w.gvr, m)
	}
}

// shardWatch returns in, filtered on the client with the view's selector when the view is sharded. It is
// filtered whatever the API server did with the selector, as a watch says nothing about it (no shardInfo): on
// a watch the API server filtered, the filter passes every object.
func shardWatch(in watch.Interface, view shardView) watch.Interface {
	if !view.sharded() {
		return in
	}
	return newFilteredWatch(in, view.sel)
}

// filteredWatch passes on the events of a watch whose objects sel matches, and every bookmark and error.
//
// Bookmarks carry a resourceVersion and no namespace or UID: filtering them as objects would keep the
// members who own the cluster-scoped objects (namespace "") up to date and starve the others, and drop
// watch-list's end-of-initial-events bookmark (annotation k8s.io/initial-events-end) on most members. A
// Modified event never takes an object out of the range, as an object cannot move to another namespace:
// unlike a filter on labels, this one needs no synthetic Deleted event. An object that sel cannot judge is
// passed on for the consumer to decide, not silently dropped.
type filteredWatch struct {
	in   watch.Interface
	sel  apisharding.Selector
	out  chan watch.Event
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var _ watch.Interface = &filteredWatch{}

func newFilteredWatch(in watch.Interface, sel apisharding.Selector) *filteredWatch {
	f := &filteredWatch{in: in, sel: sel, out: make(chan watch.Event), stop: make(chan struct{}), done: make(chan struct{})}
	go f.run()
	return f
}

func (f *filteredWatch) run() {
	defer close(f.done)
	defer close(f.out)
	for {
		select {
		case <-f.stop:
			return
		case ev, ok := <-f.in.ResultChan():
			if !ok {
				return
			}
			if !f.passes(ev) {
				continue
			}
			select {
			case f.out <- ev:
			case <-f.stop:
				return
			}
		}
	}
}

func (f *filteredWatch) passes(ev watch.Event) bool {
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted:
		ok, err := f.sel.Matches(ev.Object)
		return ok || err != nil
	default: // Bookmark, Error
		return true
	}
}

// Stop stops the underlying watch and the filter's goroutine, and returns once the result channel is closed.
func (f *filteredWatch) Stop() {
	f.once.Do(func() {
		close(f.stop)
		f.in.Stop()
	})
	<-f.done
}

// ResultChan returns the filtered events; it is closed when the underlying watch ends or Stop is called.
func (f *filteredWatch) ResultChan() <-chan watch.Event { return f.out }
