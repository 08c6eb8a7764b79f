package scan_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	serversharding "k8s.io/apiserver/pkg/sharding"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/listjson"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/internal/shard"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// nsObject is a config map of the paged client, by namespace and name.
type nsObject struct{ ns, name string }

func (o nsObject) String() string { return o.ns + "/" + o.name }

// pagedClient serves config maps from memory as an API server without ShardedListAndWatch does: it ignores
// the shardSelector and sends every object, in the pages it was given, with continue tokens and
// remainingItemCount. Its watches are fakes the test drives.
type pagedClient struct {
	pages [][]nsObject
	// beforePage, when set, is called before a page is served (0 is the first).
	beforePage func(page int)

	mu        sync.Mutex
	lists     []metav1.ListOptions
	listNS    []string
	watchOpts []metav1.ListOptions
	watches   chan *watch.RaceFreeFakeWatcher
}

func newPagedClient(pages [][]nsObject) *pagedClient {
	return &pagedClient{pages: pages, watches: make(chan *watch.RaceFreeFakeWatcher, 100)}
}

func (c *pagedClient) List(_ context.Context, _ schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*listjson.Page, error) {
	c.mu.Lock()
	c.lists = append(c.lists, opts)
	c.listNS = append(c.listNS, namespace)
	c.mu.Unlock()
	page := 0
	if opts.Continue != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(opts.Continue, "page-"))
		if err != nil {
			return nil, err
		}
		page = n
	}
	if c.beforePage != nil {
		c.beforePage(page)
	}
	var items []interface{}
	for _, o := range c.pages[page] {
		if namespace != "" && o.ns != namespace {
			continue
		}
		items = append(items, map[string]interface{}{
			"metadata": map[string]interface{}{"namespace": o.ns, "name": o.name, "uid": o.String(), "resourceVersion": "5"},
			"data":     map[string]interface{}{"bad": "true"},
		})
	}
	meta := map[string]interface{}{"resourceVersion": "100"}
	if page+1 < len(c.pages) {
		meta["continue"] = fmt.Sprintf("page-%d", page+1)
		remaining := 0
		for _, p := range c.pages[page+1:] {
			remaining += len(p)
		}
		meta["remainingItemCount"] = remaining
	}
	body, err := json.Marshal(map[string]interface{}{"apiVersion": "v1", "kind": "ConfigMapList", "metadata": meta, "items": items})
	if err != nil {
		return nil, err
	}
	return listjson.DecodePage(body)
}

func (c *pagedClient) Watch(_ context.Context, _ schema.GroupVersionResource, opts metav1.ListOptions) (watch.Interface, error) {
	c.mu.Lock()
	c.watchOpts = append(c.watchOpts, opts)
	c.mu.Unlock()
	w := watch.NewRaceFreeFake()
	c.watches <- w
	return w, nil
}

// listsSince returns the options of the LIST requests from the n-th on.
func (c *pagedClient) listsSince(n int) []metav1.ListOptions {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lists[n:])
}

// ownedBy returns whether the API server would send a member of layout l the objects of ns: the selector is
// parsed and applied by the API server's own code.
func ownedBy(t *testing.T, l shard.Layout) func(ns string) bool {
	t.Helper()
	sel, err := serversharding.Parse(l.Selector().String())
	if err != nil {
		t.Fatal(err)
	}
	return func(ns string) bool {
		ok, err := sel.Matches(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns}})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
}

// splitNamespaces returns n namespaces a member of l owns and m it does not.
func splitNamespaces(t *testing.T, l shard.Layout, n, m int) (owned, other []string) {
	t.Helper()
	owns := ownedBy(t, l)
	for i := 0; len(owned) < n || len(other) < m; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		switch {
		case owns(ns) && len(owned) < n:
			owned = append(owned, ns)
		case !owns(ns) && len(other) < m:
			other = append(other, ns)
		}
	}
	return owned, other
}

// startSharded starts a scanner over client with policy p, reading under layout l from its first LIST.
func startSharded(t *testing.T, client scan.Client, sink scan.Sink, l shard.Layout, p audit.Policy, opts scan.Options) *scan.Scanner {
	t.Helper()
	opts.Released = true
	s := scan.NewScanner(client, sink, logr.Discard(), opts)
	s.SetShard(l)
	s.SetPolicy(p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

// objectsWithResults returns "namespace/name" of every object with a result in store, sorted.
func objectsWithResults(t *testing.T, store *results.Store) []string {
	t.Helper()
	var out []string
	for _, ns := range store.Namespaces() {
		res, err := current(store, ns)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			out = append(out, r.Resource.Namespace+"/"+r.Resource.Name)
		}
	}
	sort.Strings(out)
	return out
}

// Where the API server ignores the selector, a paginated list filtered on the client is read to its end:
// most items of each page are another member's, and one page has none of this member's but a continue
// token. Every owned object, up to the last page, gets its result, and no other.
func TestClientFilteredListIsNotTruncated(t *testing.T) {
	l := shard.Layout{Index: 1, Count: 3, Epoch: 4}
	owned, other := splitNamespaces(t, l, 11, 12*7+8)
	var pages [][]nsObject
	var want []string
	for k := range 12 {
		var page []nsObject
		for i := range 7 {
			page = append(page, nsObject{other[k*7+i], fmt.Sprintf("cm-%d", k)})
		}
		if k == 5 {
			page = append(page, nsObject{other[12*7+k%8], "cm-empty"}) // this page keeps nothing
		} else {
			o := nsObject{owned[min(k, 10)], fmt.Sprintf("cm-%d", k)}
			page = append(page, o)
			want = append(want, o.String())
		}
		pages = append(pages, page)
	}
	sort.Strings(want)
	client := newPagedClient(pages)
	store := results.NewStore(nil, results.KeepPasses(true))
	var modes []scan.ShardMode
	var modesMu sync.Mutex
	s := startSharded(t, client, store, l, &keyPolicy{name: "bad", key: "bad"}, scan.Options{
		OnShardMode: func(_ schema.GroupVersionResource, m scan.ShardMode) {
			modesMu.Lock()
			modes = append(modes, m)
			modesMu.Unlock()
		},
	})
	waitSynced(t, s)

	if got := objectsWithResults(t, store); !slices.Equal(got, want) {
		t.Fatalf("objects with results:\n got %v\nwant %v", got, want)
	}
	lists := client.listsSince(0)
	if len(lists) != len(pages) {
		t.Fatalf("%d LIST requests, want one per page (%d)", len(lists), len(pages))
	}
	for i, o := range lists {
		if o.ShardSelector != l.Selector().String() {
			t.Fatalf("LIST %d: shardSelector %q, want %q", i, o.ShardSelector, l.Selector().String())
		}
	}
	if m := scan.ShardModeOf(s, configMaps); m != scan.ShardClient {
		t.Fatalf("mode %q, want %q", m, scan.ShardClient)
	}
	modesMu.Lock()
	defer modesMu.Unlock()
	if !slices.Equal(modes, []scan.ShardMode{scan.ShardClient}) {
		t.Fatalf("modes reported %v, want one change to client", modes)
	}
}

// A member that does not own the cluster-scoped objects (namespace "", which a bookmark's empty namespace
// hashes as) still receives bookmarks: its next watch resumes from the bookmark's resourceVersion.
func TestBookmarkReachesMemberNotOwningClusterScope(t *testing.T) {
	var l shard.Layout
	for i := range 3 {
		if c := (shard.Layout{Index: i, Count: 3}); !ownedBy(t, c)("") {
			l = c
			break
		}
	}
	owned, _ := splitNamespaces(t, l, 1, 0)
	client := newPagedClient([][]nsObject{{{owned[0], "cm"}}})
	s := startSharded(t, client, results.NewStore(nil), l, &keyPolicy{name: "bad", key: "bad"}, scan.Options{})
	waitSynced(t, s)
	nextWatch := func() (*watch.RaceFreeFakeWatcher, metav1.ListOptions) {
		select {
		case w := <-client.watches:
			client.mu.Lock()
			defer client.mu.Unlock()
			return w, client.watchOpts[len(client.watchOpts)-1-len(client.watches)]
		case <-time.After(30 * time.Second):
			t.Fatal("no watch")
			return nil, metav1.ListOptions{}
		}
	}
	w, opts := nextWatch()
	if opts.ShardSelector != l.Selector().String() {
		t.Fatalf("watch with selector %q, want %q", opts.ShardSelector, l.Selector().String())
	}
	// A watch may end by itself as the scanner starts (a wake left by the first read), taking the bookmark
	// with it: a few watches are tried, each with a bookmark of its own.
	var rvs []string
	for attempt := range 3 {
		rv := fmt.Sprint(777 + attempt)
		w.Action(watch.Bookmark, &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]interface{}{"resourceVersion": rv, "annotations": map[string]interface{}{metav1.InitialEventsAnnotationKey: "true"}},
		}})
		w.Stop() // the watch ends: the scanner watches again from the last resourceVersion it saw
		w, opts = nextWatch()
		if opts.ResourceVersion == rv {
			return
		}
		rvs = append(rvs, opts.ResourceVersion)
	}
	t.Fatalf("the watches after the bookmarks started from resourceVersions %v, want those of the bookmarks", rvs)
}

// recordingSink passes results to a store and records those stored, once armed, about a namespace the
// member's current layout does not own.
type recordingSink struct {
	*results.Store
	owns   func(ns string) bool
	armed  atomic.Bool
	mu     sync.Mutex
	stolen []string
}

func (r *recordingSink) Set(policy audit.PolicyKey, obj results.ObjectKey, namespace string, res []audit.Result) bool {
	if r.armed.Load() && len(res) > 0 && !r.owns(namespace) {
		r.mu.Lock()
		r.stolen = append(r.stolen, string(obj.UID))
		r.mu.Unlock()
	}
	return r.Store.Set(policy, obj, namespace, res)
}

// A layout change while a list is under way, as a page is read or as an object is evaluated: what was read
// under the old layout adds no result after the change, the list is made again under the new layout, and
// the results end as the new layout's: the objects no longer owned lose theirs, the newly owned ones get
// theirs.
func TestShardChangeDuringListKeepsOnlyNewLayout(t *testing.T) {
	t.Run("page being read", func(t *testing.T) { testShardChangeDuringList(t, false) })
	t.Run("object being evaluated", func(t *testing.T) { testShardChangeDuringList(t, true) })
}

func testShardChangeDuringList(t *testing.T, duringEvaluation bool) {
	a := shard.Layout{Index: 0, Count: 2, Epoch: 1}
	b := shard.Layout{Index: 1, Count: 2, Epoch: 2}
	ownedByA, ownedByB := splitNamespaces(t, a, 6, 6)
	var pages [][]nsObject
	var want []string
	for k := range 3 {
		var page []nsObject
		for i := range 2 {
			page = append(page, nsObject{ownedByA[k*2+i], "cm"}, nsObject{ownedByB[k*2+i], "cm"})
			want = append(want, ownedByB[k*2+i]+"/cm")
		}
		pages = append(pages, page)
	}
	sort.Strings(want)
	client := newPagedClient(pages)
	requested, release := make(chan struct{}), make(chan struct{})
	var p audit.Policy = &keyPolicy{name: "bad", key: "bad"}
	if duringEvaluation {
		// The first evaluation, of page 0's first object, waits.
		p = &heldPolicy{keyPolicy: keyPolicy{name: "bad", key: "bad"}, started: requested, release: release}
	} else {
		// Page 1 is held back until the layout has changed.
		var once sync.Once
		client.beforePage = func(page int) {
			if page == 1 {
				once.Do(func() {
					close(requested)
					<-release
				})
			}
		}
	}
	sink := &recordingSink{Store: results.NewStore(nil, results.KeepPasses(true)), owns: ownedBy(t, b)}
	s := startSharded(t, client, sink, a, p, scan.Options{Workers: 1})
	select {
	case <-requested:
	case <-time.After(30 * time.Second):
		t.Fatal("the list did not reach the point of the change")
	}
	before := len(client.listsSince(0))
	s.SetShard(b)
	sink.armed.Store(true)
	close(release)
	waitSynced(t, s)

	envtestutil.Eventually(t, 20*time.Second, func() error {
		if got := objectsWithResults(t, sink.Store); !slices.Equal(got, want) {
			return fmt.Errorf("objects with results:\n got %v\nwant %v", got, want)
		}
		return nil
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.stolen) > 0 {
		t.Fatalf("results stored after the layout changed for objects it does not own: %v", sink.stolen)
	}
	relists := client.listsSince(before)
	if len(relists) < len(pages) {
		t.Fatalf("%d LIST requests after the change, want a full list (%d pages)", len(relists), len(pages))
	}
	if duringEvaluation {
		// The page read ahead while the first was evaluated may have been asked for under the old layout
		// (and dropped): the relist is the last pages.
		relists = relists[len(relists)-len(pages):]
	}
	for _, o := range relists {
		if o.ShardSelector != b.Selector().String() {
			t.Fatalf("LIST after the change with selector %q, want %q", o.ShardSelector, b.Selector().String())
		}
	}
}

// A rescan of one namespace lists it only if the member owns it.
func TestRescanOfNamespaceNotOwnedReadsNothing(t *testing.T) {
	l := shard.Layout{Index: 0, Count: 2}
	owned, other := splitNamespaces(t, l, 1, 1)
	client := newPagedClient([][]nsObject{{{owned[0], "cm"}, {other[0], "cm"}}})
	p := &keyPolicy{name: "bad", key: "bad"}
	s := startSharded(t, client, results.NewStore(nil), l, p, scan.Options{
		Namespaced: func(schema.GroupVersionResource) (bool, bool) { return true, true },
	})
	waitSynced(t, s)
	s.Rescan(p.Key(), other[0])
	s.Rescan(p.Key(), owned[0])
	envtestutil.Eventually(t, 20*time.Second, func() error {
		client.mu.Lock()
		defer client.mu.Unlock()
		if !slices.Contains(client.listNS, owned[0]) {
			return fmt.Errorf("the owned namespace was not listed: %v", client.listNS)
		}
		return nil
	})
	waitSynced(t, s)
	client.mu.Lock()
	defer client.mu.Unlock()
	if slices.Contains(client.listNS, other[0]) {
		t.Fatalf("a namespace the member does not own was listed: %v", client.listNS)
	}
}

// A member scaled away (its ordinal not below the replicas) owns nothing: its watch ends, it keeps no result
// and sends no LIST or WATCH, not even for a rescan or a new policy (an empty shardRange is no valid
// selector); once a layout gives it a range again, it lists that range and keeps its objects' results.
func TestMemberOwningNothingReadsNothing(t *testing.T) {
	a := shard.Layout{Index: 0, Count: 2, Epoch: 1}
	b := shard.Layout{Index: 1, Count: 2, Epoch: 3}
	ownedByA, ownedByB := splitNamespaces(t, a, 2, 2)
	client := newPagedClient([][]nsObject{{{ownedByA[0], "cm"}, {ownedByB[0], "cm"}}, {{ownedByA[1], "cm"}, {ownedByB[1], "cm"}}})
	store := results.NewStore(nil, results.KeepPasses(true))
	p := &keyPolicy{name: "bad", key: "bad"}
	s := startSharded(t, client, store, a, p, scan.Options{Workers: 1})
	var watching *watch.RaceFreeFakeWatcher
	select {
	case watching = <-client.watches:
	case <-time.After(30 * time.Second):
		t.Fatal("no watch after the first list")
	}
	waitSynced(t, s)
	if got, want := objectsWithResults(t, store), []string{ownedByA[0] + "/cm", ownedByA[1] + "/cm"}; !slices.Equal(got, want) {
		t.Fatalf("objects with results under %s: %v, want %v", a, got, want)
	}

	none := shard.Member(2, 2, 2)
	if !none.None {
		t.Fatalf("ordinal 2 of 2 replicas: layout %s, want one that owns nothing", none)
	}
	lists, watches := len(client.listsSince(0)), len(client.watchOpts)
	s.SetShard(none)
	envtestutil.Eventually(t, 20*time.Second, func() error {
		if !watching.IsStopped() {
			return fmt.Errorf("the watch under %s is still open", a)
		}
		if got := objectsWithResults(t, store); len(got) > 0 {
			return fmt.Errorf("a member owning nothing keeps results of %v", got)
		}
		return nil
	})
	// A rescan and a new policy would read the resource: the member owning nothing takes them and reads nothing.
	s.Rescan(p.Key(), "")
	other := &keyPolicy{name: "other", key: "other"}
	s.SetPolicy(other)
	waitSynced(t, s)
	client.mu.Lock()
	after := slices.Clone(client.lists[lists:])
	watchedAfter := slices.Clone(client.watchOpts[watches:])
	client.mu.Unlock()
	if len(after) > 0 || len(watchedAfter) > 0 {
		t.Fatalf("a member owning nothing sent %d LIST (%v) and %d WATCH (%v) requests", len(after), after, len(watchedAfter), watchedAfter)
	}

	s.RemovePolicy(other.Key())
	lists = len(client.listsSince(0))
	s.SetShard(b)
	waitSynced(t, s)
	envtestutil.Eventually(t, 20*time.Second, func() error {
		if got, want := objectsWithResults(t, store), []string{ownedByB[0] + "/cm", ownedByB[1] + "/cm"}; !slices.Equal(got, want) {
			return fmt.Errorf("objects with results under %s: %v, want %v", b, got, want)
		}
		return nil
	})
	relists := client.listsSince(lists)
	if len(relists) == 0 {
		t.Fatalf("no LIST once the member owns a range again")
	}
	for _, o := range relists {
		if o.ShardSelector != b.Selector().String() {
			t.Fatalf("LIST with selector %q, want %q", o.ShardSelector, b.Selector().String())
		}
	}
}
