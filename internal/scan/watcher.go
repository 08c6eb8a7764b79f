package scan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/listjson"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/uidmap"
)

// errShardChanged stops a list made under a layout that changed meanwhile: it is made again under the new one.
var errShardChanged = errors.New("the shard layout changed during the list")

// digest is all a watcher keeps of an object once it has been evaluated: enough to tell whether a listed
// object changed since, and where its results live. 16 bytes: it is kept for every audited object.
type digest struct {
	namespace uint32 // index into watcher.nsNames
	opaque    bool   // rv is a hash of a resourceVersion that is not an etcd revision
	rv        uint64
}

func (w *watcher) digestOf(obj *unstructured.Unstructured) digest {
	ns := obj.GetNamespace()
	idx, ok := w.nsIndex[ns]
	if !ok {
		idx = uint32(len(w.nsNames))
		w.nsNames = append(w.nsNames, ns)
		w.nsIndex[ns] = idx
	}
	rv := obj.GetResourceVersion()
	if n, err := strconv.ParseUint(rv, 10, 64); err == nil {
		return digest{namespace: idx, rv: n}
	}
	h := fnv.New64a()
	h.Write([]byte(rv))
	return digest{namespace: idx, opaque: true, rv: h.Sum64()}
}

// newerThan reports whether d is a later version of the object than old. Opaque resourceVersions cannot be
// ordered: any difference counts as newer.
func (d digest) newerThan(old digest) bool {
	if d.opaque || old.opaque {
		return d != old
	}
	return d.rv > old.rv
}

// watcher reads one resource. Only its run goroutine touches digests, nsNames, nsIndex and lastRV, and the
// workers of evaluatePage, which it waits for, under their lock.
type watcher struct {
	scanner *Scanner
	gvr     schema.GroupVersionResource
	cancel  context.CancelFunc // guarded by scanner.mu

	mu      sync.Mutex
	pending map[audit.PolicyKey]map[string]bool // policy -> namespaces to rescan ("" = all)
	relist  bool                                // the shard layout changed: list everything again
	listed  bool
	busy    bool
	wake    chan struct{}

	unreadable bool      // guarded by mu: the last read failed and its error results are recorded
	shardMode  ShardMode // guarded by mu: how the last page was filtered

	digests uidmap.Map[digest]
	nsNames []string          // namespaces of digests, by index
	nsIndex map[string]uint32 // index of each namespace in nsNames
	lastRV  string
	// readError is the message of the error results recorded because the resource cannot be read; "" when
	// it can. watchError is the last watch failure logged.
	readError  string
	watchError string
}

func newWatcher(s *Scanner, gvr schema.GroupVersionResource) *watcher {
	return &watcher{
		scanner: s,
		gvr:     gvr,
		pending: map[audit.PolicyKey]map[string]bool{},
		wake:    make(chan struct{}, 1),
		nsIndex: map[string]uint32{},
	}
}

func (w *watcher) requestRescan(policy audit.PolicyKey, namespace string) {
	w.mu.Lock()
	ns := w.pending[policy]
	if ns == nil {
		ns = map[string]bool{}
		w.pending[policy] = ns
	}
	ns[namespace] = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// requestRelist asks for a list of everything under the scanner's current layout, which ends the watch.
func (w *watcher) requestRelist() {
	w.mu.Lock()
	w.relist = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	// A resource that cannot be read is settled once its error results are recorded: waiting for it would
	// hold back every report.
	return (w.listed || w.unreadable) && !w.busy && (len(w.pending) == 0 && !w.relist || w.unreadable)
}

// takePending returns the pending rescans and whether a relist was asked for, and marks the watcher busy
// until done is called.
func (w *watcher) takePending() (all policySet, byNS map[string]policySet, relist bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	relist, w.relist = w.relist, false
	all, byNS = policySet{}, map[string]policySet{}
	for policy, nss := range w.pending {
		for ns := range nss {
			if ns == "" {
				all[policy] = true
				continue
			}
			if byNS[ns] == nil {
				byNS[ns] = policySet{}
			}
			byNS[ns][policy] = true
		}
	}
	w.pending = map[audit.PolicyKey]map[string]bool{}
	w.busy = true
	return all, byNS, relist
}

// done marks the watcher no longer busy, its resource read when listed is set, and tells the scanner, which
// may now be synced, unless the watcher is stopping (see Scanner.startLocked).
func (w *watcher) done(ctx context.Context, listed bool) {
	w.mu.Lock()
	w.busy = false
	if listed {
		w.listed = true
	}
	w.mu.Unlock()
	if ctx.Err() == nil {
		w.scanner.settled()
	}
}

func (w *watcher) run(ctx context.Context) {
	log := w.scanner.log.WithValues("resource", w.gvr.String())
	select {
	case <-w.scanner.released:
	case <-ctx.Done():
		return
	}
	needList := true
	failures := 0 // failed reads in a row, which set the backoff
	for ctx.Err() == nil {
		if w.scanner.currentView().readsNothing() {
			// Owning nothing, the member reads nothing until SetShard gives it a range, which wakes it.
			w.forgetAll(ctx)
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			}
			needList, failures = true, 0
			continue
		}
		if err := w.read(ctx, needList); err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errShardChanged) {
				// Not a failure: the read was cut short to be made again under the new layout.
				needList = true
				continue
			}
			failures++
			wait := w.scanner.backoff(failures)
			log.V(1).Info("Reading the resource failed, retrying", "err", err.Error(), "after", wait)
			w.scanner.sleep(ctx, wait)
			continue
		}
		needList, failures = false, 0
		expired, err := w.watch(ctx)
		switch {
		case expired:
			log.V(1).Info("Watch expired, relisting")
			needList = true
		case err != nil && ctx.Err() == nil:
			failures++
			w.watchFailed(ctx, log, err, failures)
		default:
			w.watchError = ""
		}
	}
}

// forgetAll drops, for a member that owns nothing, every result of the resource (those of its objects and
// its read error) and the pending rescans, and counts the resource as read: there is nothing to wait for.
func (w *watcher) forgetAll(ctx context.Context) {
	w.takePending()
	w.digests.DeleteMissing(&uidmap.Map[struct{}]{}, func(digest) bool { return true }, func(uid types.UID, d digest) {
		w.scanner.deleteObject(w.gvr, uid, w.nsNames[d.namespace])
	})
	w.lastRV = ""
	w.setReadError(nil)
	w.done(ctx, true)
}

// read does the pending rescans: a full list when one is needed or asked for, which covers the rescans
// scoped to a namespace too, or else a list of each namespace a rescan is scoped to. The rescans of a read
// that fails are put back, to be done when it is retried.
func (w *watcher) read(ctx context.Context, needList bool) error {
	all, byNS, relist := w.takePending()
	var err error
	if needList || relist || len(all) > 0 {
		// A full list covers every pending rescan: scoped ones are a subset of it.
		for _, nss := range byNS {
			for p := range nss {
				all[p] = true
			}
		}
		err = w.list(ctx, "", all)
	} else {
		for ns, policies := range byNS {
			if err = w.list(ctx, ns, policies); err != nil {
				break
			}
		}
	}
	if err != nil {
		w.requeue(all, byNS)
		if relist {
			w.requestRelist()
		}
		w.done(ctx, false)
		return err
	}
	w.done(ctx, true)
	return nil
}

// watchFailed logs a failed watch, at V(1) when it failed as the last one did, and waits the backoff of the
// given number of failed reads in a row.
func (w *watcher) watchFailed(ctx context.Context, log logr.Logger, err error, failures int) {
	wait := w.scanner.backoff(failures)
	if msg := err.Error(); msg != w.watchError {
		w.watchError = msg
		log.Info("Watching the resource failed, retrying with backoff", "err", msg, "after", wait)
	} else {
		log.V(1).Info("Watching the resource failed, retrying", "err", msg, "after", wait)
	}
	w.scanner.sleep(ctx, wait)
}

// backoff is the wait after the given number of failed reads in a row: Options.Backoff doubled for each
// failure after the first, at most Options.MaxBackoff.
func (s *Scanner) backoff(failures int) time.Duration {
	d := s.opts.Backoff
	for i := 1; i < failures && d < s.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, s.opts.MaxBackoff)
}

// requeue puts back rescans that could not be done.
func (w *watcher) requeue(all policySet, byNS map[string]policySet) {
	for p := range all {
		w.requestRescan(p, "")
	}
	for ns, ps := range byNS {
		for p := range ps {
			w.requestRescan(p, ns)
		}
	}
}

// list reads the resource (in namespace, or everywhere) page by page. Objects that changed since they were
// last read are evaluated with every policy; unchanged ones only with the policies in rescan. Objects that
// were known in that scope but are gone lose their results. A cluster-wide list also moves the watch start to
// the list's resourceVersion.
func (w *watcher) list(ctx context.Context, namespace string, rescan policySet) error {
	s := w.scanner
	view := s.currentView()
	opts := metav1.ListOptions{Limit: s.opts.PageSize, ShardSelector: view.selector}
	scope := namespace
	if namespace != "" && isNamespaces(w.gvr) {
		// A change of one namespace concerns, of the Namespaces, that one (see Scanner.Rescan). It is
		// cluster-scoped: it is read by name, and a name that is gone was seen by the watch.
		scope = ""
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", namespace).String()
	}
	var seen uidmap.Map[struct{}]
	listRV, err := w.readPages(ctx, scope, opts, view, s.policiesFor(w.gvr, nil), s.policiesFor(w.gvr, rescan), &seen)
	if err != nil {
		return err
	}
	if opts.FieldSelector != "" {
		return nil
	}
	w.digests.DeleteMissing(&seen, func(d digest) bool {
		return namespace == "" || w.nsNames[d.namespace] == namespace
	}, func(uid types.UID, d digest) {
		s.deleteObject(w.gvr, uid, w.nsNames[d.namespace])
	})
	if namespace == "" {
		w.lastRV = listRV
	}
	return nil
}

// readPages lists the resource in scope page by page and evaluates each page (see evaluatePage), recording
// the objects seen, and returns the resourceVersion of the list. A continue token that expires starts the
// list over. The list is made under view; when the layout changes meanwhile it stops with errShardChanged.
func (w *watcher) readPages(ctx context.Context, scope string, opts metav1.ListOptions, view shardView, every, only []audit.Policy,
	seen *uidmap.Map[struct{}]) (listRV string, err error) {
	s := w.scanner
	// The next page is requested before the current one is evaluated, so that the API server encodes it
	// while the workers evaluate: reading and evaluating one page after the other would leave the operator
	// idle during every request and the API server idle during every evaluation.
	next := w.fetch(ctx, scope, opts, view)
	for next != nil {
		got := <-next
		next = nil
		if got.err != nil {
			s.returnPage(got)
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			if (apierrors.IsResourceExpired(got.err) || apierrors.IsGone(got.err)) && opts.Continue != "" {
				// The continue token expired mid-list: start over, nothing is lost as seen is rebuilt.
				opts.Continue = ""
				*seen = uidmap.Map[struct{}]{}
				next = w.fetch(ctx, scope, opts, view)
				continue
			}
			w.setReadError(got.err)
			return "", fmt.Errorf("listing %s: %w", w.gvr, got.err)
		}
		if s.currentView().gen != view.gen {
			// The layout changed while the page was read: it is not evaluated, nor the next one asked for.
			s.returnPage(got)
			return "", errShardChanged
		}
		page := got.page
		if opts.Continue = page.List.GetContinue(); opts.Continue != "" {
			next = w.fetch(ctx, scope, opts, view)
		}
		err := w.evaluatePage(ctx, page, view.gen, every, only, seen)
		s.returnPage(got)
		if err == nil && s.currentView().gen != view.gen {
			err = errShardChanged
		}
		if err != nil {
			if next != nil {
				s.returnPage(<-next)
			}
			if errors.Is(err, errShardChanged) {
				return "", err
			}
			w.setReadError(err)
			return "", fmt.Errorf("listing %s: %w", w.gvr, err)
		}
		w.setReadError(nil)
		if listRV == "" {
			listRV = page.List.GetResourceVersion()
		}
	}
	return listRV, nil
}

// fetched is one LIST page, or the error reading it, and whether it holds a page token.
type fetched struct {
	page  *listjson.Page
	err   error
	token bool
}

// fetch reads one page in the background and leaves on it the objects of view's namespaces only (see
// shardPage). It takes a page token before its request, which the reader gives back with returnPage once the
// page is evaluated or dropped, so that the pages held across resources stay bounded. The result is always
// delivered, also when ctx ends, so that no token is lost.
func (w *watcher) fetch(ctx context.Context, namespace string, opts metav1.ListOptions, view shardView) <-chan fetched {
	out := make(chan fetched, 1)
	go func() {
		select {
		case w.scanner.pages <- struct{}{}:
		case <-ctx.Done():
			out <- fetched{err: ctx.Err()}
			return
		}
		page, err := w.scanner.client.List(ctx, w.gvr, namespace, opts)
		if err == nil {
			if err = w.shardPage(page, view); err != nil {
				err = fmt.Errorf("filtering a page on the shard selector: %w", err)
			}
		}
		out <- fetched{page: page, err: err, token: true}
	}()
	return out
}

// returnPage gives back the page token of f, if it holds one.
func (s *Scanner) returnPage(f fetched) {
	if f.token {
		<-s.pages
	}
}

// evaluatePage evaluates the objects of a page that changed since they were last read with every policy, and
// the others with the policies in only. Workers decode the objects as they take them, so that a page's
// decoded objects never all exist at once: decoded pages would be the largest part of the operator's heap
// while it reads.
//
// The page was read under the layout generation gen: an object whose results are dropped because the layout
// changed since is forgotten, so that the relist under the new layout evaluates it anew.
func (w *watcher) evaluatePage(ctx context.Context, page *listjson.Page, gen uint64, every, only []audit.Policy, seen *uidmap.Map[struct{}]) error {
	var (
		mu       sync.Mutex // guards seen, digests and the first error while workers run
		firstErr error
	)
	evaluate := func(i int) {
		obj, err := page.Item(i)
		if err != nil {
			mu.Lock()
			firstErr = cmp.Or(firstErr, err)
			mu.Unlock()
			return
		}
		uid := obj.GetUID()
		mu.Lock()
		seen.Set(uid, struct{}{})
		old, known := w.digests.Get(uid)
		d := w.digestOf(obj)
		w.digests.Set(uid, d)
		mu.Unlock()
		policies := every
		if known && d == old {
			policies = only
		}
		if len(policies) > 0 && !w.scanner.evaluate(ctx, w.gvr, obj, policies, gen) {
			mu.Lock()
			w.digests.Delete(uid)
			mu.Unlock()
		}
	}
	forEach(page.Len(), w.scanner.opts.Workers, evaluate)
	return firstErr
}

// forEach calls fn with 0..n-1 on up to workers goroutines, and returns when every call has.
func forEach(n, workers int, fn func(i int)) {
	workers = min(workers, n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// watch follows changes from lastRV until the watch ends, a rescan is requested or ctx is done. It reports
// whether the watch expired (410), which calls for a relist.
func (w *watcher) watch(ctx context.Context) (expired bool, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timeout := int64(w.scanner.opts.WatchTimeout / time.Second)
	view := w.scanner.currentView()
	wi, err := w.scanner.client.Watch(wctx, w.gvr, metav1.ListOptions{
		ResourceVersion:     w.lastRV,
		AllowWatchBookmarks: true,
		TimeoutSeconds:      &timeout,
		ShardSelector:       view.selector,
	})
	if err != nil {
		return apierrors.IsResourceExpired(err) || apierrors.IsGone(err), fmt.Errorf("watching %s: %w", w.gvr, err)
	}
	wi = shardWatch(wi, view)
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case <-w.wake:
			return false, nil
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return false, nil
			}
			if expired, err := w.handle(ctx, ev, view.gen); expired || err != nil {
				return expired, err
			}
		}
	}
}

// handle applies one watch event read under the layout generation gen.
func (w *watcher) handle(ctx context.Context, ev watch.Event, gen uint64) (expired bool, err error) {
	if ev.Type == watch.Error {
		status := apierrors.FromObject(ev.Object)
		var se *apierrors.StatusError
		if errors.As(status, &se) && (se.ErrStatus.Code == http.StatusGone || apierrors.IsResourceExpired(status)) {
			return true, nil
		}
		return false, fmt.Errorf("watch error on %s: %w", w.gvr, status)
	}
	obj, ok := ev.Object.(*unstructured.Unstructured)
	if !ok {
		return false, nil
	}
	rv := obj.GetResourceVersion()
	w.lastRV = rv
	switch ev.Type {
	case watch.Bookmark:
	case watch.Deleted:
		uid := obj.GetUID()
		w.digests.Delete(uid)
		w.scanner.deleteObject(w.gvr, uid, obj.GetNamespace())
	case watch.Added, watch.Modified:
		uid := obj.GetUID()
		d := w.digestOf(obj)
		if old, known := w.digests.Get(uid); known && !d.newerThan(old) {
			return false, nil
		}
		w.digests.Set(uid, d)
		if !w.scanner.evaluate(ctx, w.gvr, obj, w.scanner.policiesFor(w.gvr, nil), gen) {
			w.digests.Delete(uid)
		}
	}
	return false, nil
}

// setReadError reports, as an error result of every policy covering the resource, that the resource cannot
// be read; nil clears it. The results, the log line and OnReadError follow the error's text: they change
// when it changes, not on every retry.
func (w *watcher) setReadError(err error) {
	if apierrors.IsForbidden(err) {
		err = &audit.ForbiddenRead{Resource: w.gvr.GroupResource(), Grant: w.scanner.opts.ForbiddenHint, Err: err}
	}
	msg := ""
	if err != nil {
		msg = fmt.Sprintf("cannot read %s: %v", ResourceString(w.gvr), err)
	}
	if msg == w.readError {
		return
	}
	w.readError = msg
	defer func() {
		w.mu.Lock()
		w.unreadable = msg != ""
		w.mu.Unlock()
	}()
	policies := w.scanner.policiesFor(w.gvr, nil)
	keys := make([]audit.PolicyKey, len(policies))
	key := results.ObjectKey{GVR: w.gvr}
	for i, p := range policies {
		keys[i] = p.Key()
		var res []audit.Result
		if err != nil {
			res = []audit.Result{resourceResult(p, w.gvr, w.scanner.kindOf(w.gvr), audit.Error, msg)}
		}
		w.scanner.live.RLock()
		if w.scanner.covers(p.Key(), w.gvr) {
			w.scanner.sink.Set(p.Key(), key, "", res)
		}
		w.scanner.live.RUnlock()
	}
	log := w.scanner.log.WithValues("resource", w.gvr.String(), "policies", policyStrings(keys))
	if err != nil {
		log.Info("Cannot read the resource: its objects are not audited until it can be read; retrying with backoff", "err", err.Error())
	} else {
		log.Info("The resource can be read again")
	}
	if f := w.scanner.opts.OnReadError; f != nil {
		f(w.gvr, keys, err)
	}
}

// resourceResult is the result of policy p about resource gvr (of the given kind, "" if unknown) as a whole,
// msg saying why: an error for a resource that cannot be read, a skip for one that is withheld (see
// Options.Withheld). It is complete as the policy's other results are, so that report readers such as Policy
// Reporter file it with them: the rule "read (<resource>)", distinct for each resource the policy covers, and
// the policy's category and severity. It is about no object: its resource is the resource's apiVersion and
// kind, which readers show where they show an object's, rather than a blank one.
func resourceResult(p audit.Policy, gvr schema.GroupVersionResource, kind string, verdict audit.Verdict, msg string) audit.Result {
	category, severity := audit.ClassOf(p)
	return audit.Result{
		Policy:       p.Key().Name,
		PolicySource: p.Key().Source,
		Rule:         audit.RuleName(audit.RuleRead, ResourceString(gvr)),
		Category:     category,
		Severity:     severity,
		Verdict:      verdict,
		Message:      msg,
		Properties: map[string]string{
			"resource": ResourceString(gvr),
		},
		Resource: audit.ObjectRef{APIVersion: gvr.GroupVersion().String(), Kind: kind},
	}
}

// ResourceString names gvr as results and messages show it: "version/resource" for the core group,
// "group/version/resource" for the others.
func ResourceString(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Version + "/" + gvr.Resource
	}
	return gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
