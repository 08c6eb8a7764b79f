package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/report"
)

var (
	policyReportsGVR        = v1alpha2.GroupVersion.WithResource("policyreports")
	clusterPolicyReportsGVR = v1alpha2.GroupVersion.WithResource("clusterpolicyreports")
	openReportsGVR          = schema.GroupVersionResource{Group: "openreports.io", Version: "v1alpha1", Resource: "reports"}
	clusterOpenReportsGVR   = schema.GroupVersionResource{Group: "openreports.io", Version: "v1alpha1", Resource: "clusterreports"}
)

// listedKey is one listed result: the policy and the object it is about.
type listedKey struct {
	policy, kind, name string
}

// reportState is what the harness keeps of one report.
type reportState struct {
	// counted: the report is of the API whose summaries, listed results and events the harness follows; with
	// --report-api=both, the OpenReports copies are only sized.
	counted   bool
	namespace string
	summary   counts
	listed    map[listedKey]string // -> verdict
	bytes     int
	// shard is the report's celaudit.io/shard annotation ("index/count"), written in sharded mode.
	shard string
	// gvr and name, with namespace, name the report, to delete it.
	gvr  schema.GroupVersionResource
	name string
}

// reports follows celaudit's reports through one long watch per report kind, started before any measured
// window so that it costs no request inside one. Every event is timestamped on arrival.
type reports struct {
	mu        sync.Mutex
	byName    map[string]*reportState // namespace/name; cluster reports under "/name"
	totals    counts
	lastEvent time.Time
	// lastByShard is the time of the last event of a report, by its shard annotation ("" unsharded).
	lastByShard map[string]time.Time
	events      int
	listeners   []func(ns string, at time.Time)
	errs        []error
}

func newReports() *reports {
	return &reports{byName: map[string]*reportState{}, lastByShard: map[string]time.Time{}}
}

// watch follows the managed reports with an informer, so that a watch the API server closes (a slow
// consumer during a burst of report writes, a timeout) resumes from the last resourceVersion instead of
// losing events. The informers end with ctx.
//
// api is the operator's --report-api: the reports of wgpolicy (and of both) are the ones whose summaries,
// listed results and events are followed; with both, the OpenReports copies are watched for their sizes.
func (r *reports) watch(ctx context.Context, dyn dynamic.Interface, api string) error {
	selector := report.ManagedByLabel + "=" + report.ManagedByValue
	followed := []schema.GroupVersionResource{policyReportsGVR, clusterPolicyReportsGVR}
	var sized []schema.GroupVersionResource
	switch api {
	case "openreports":
		followed = []schema.GroupVersionResource{openReportsGVR, clusterOpenReportsGVR}
	case "both":
		sized = []schema.GroupVersionResource{openReportsGVR, clusterOpenReportsGVR}
	}
	for _, gvr := range append(followed, sized...) {
		counted := gvr.Group != "openreports.io" || api == "openreports"
		ri := dyn.Resource(gvr)
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				opts.LabelSelector = selector
				return ri.List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				opts.LabelSelector = selector
				return ri.Watch(ctx, opts)
			},
		}
		event := func(t watch.EventType) func(obj interface{}) {
			return func(obj interface{}) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if o, ok := obj.(runtime.Object); ok {
					r.handle(watch.Event{Type: t, Object: o}, time.Now(), gvr, counted)
				}
			}
		}
		_, inf := cache.NewInformerWithOptions(cache.InformerOptions{
			ListerWatcher: lw,
			ObjectType:    &unstructured.Unstructured{},
			Handler: cache.ResourceEventHandlerFuncs{
				AddFunc:    event(watch.Added),
				UpdateFunc: func(_, obj interface{}) { event(watch.Modified)(obj) },
				DeleteFunc: event(watch.Deleted),
			},
		})
		go inf.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("watching %s: %w", gvr.Resource, ctx.Err())
		}
	}
	return nil
}

func (r *reports) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *reports) handle(ev watch.Event, at time.Time, gvr schema.GroupVersionResource, counted bool) {
	u, ok := ev.Object.(*unstructured.Unstructured)
	if !ok {
		if ev.Type == watch.Error {
			r.fail(fmt.Errorf("report watch error: %v", ev.Object))
		}
		return
	}
	raw, err := json.Marshal(u.Object)
	if err != nil {
		r.fail(fmt.Errorf("encoding report: %w", err))
		return
	}
	var rep v1alpha2.PolicyReport // the cluster report has the same summary and results
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rep); err != nil {
		r.fail(fmt.Errorf("decoding report %s: %w", u.GetName(), err))
		return
	}
	st := newReportState(u, &rep, len(raw), gvr, counted)
	key := u.GroupVersionKind().Group + "/" + u.GetNamespace() + "/" + u.GetName()

	r.mu.Lock()
	if old := r.byName[key]; old != nil && old.counted {
		r.totals.sub(old.summary)
	}
	if ev.Type == watch.Deleted {
		delete(r.byName, key)
	} else {
		r.byName[key] = st
		if counted {
			r.totals.add(st.summary)
		}
	}
	// Events of every watched API: the reports settle when all of them are written.
	if ev.Type != watch.Bookmark {
		r.lastEvent = at
		r.events++
		if ev.Type != watch.Deleted {
			r.lastByShard[st.shard] = at
		}
	}
	var listeners []func(string, time.Time)
	if counted {
		listeners = append(listeners, r.listeners...)
	}
	r.mu.Unlock()
	for _, l := range listeners {
		l(u.GetNamespace(), at)
	}
}

// newReportState is what the harness keeps of report u, decoded as rep, of size bytes.
func newReportState(u *unstructured.Unstructured, rep *v1alpha2.PolicyReport, bytes int, gvr schema.GroupVersionResource, counted bool) *reportState {
	st := &reportState{
		counted:   counted,
		namespace: u.GetNamespace(),
		summary:   counts{Pass: rep.Summary.Pass, Fail: rep.Summary.Fail, Warn: rep.Summary.Warn, Error: rep.Summary.Error, Skip: rep.Summary.Skip},
		listed:    map[listedKey]string{},
		bytes:     bytes,
		shard:     u.GetAnnotations()[shardAnnotation],
		gvr:       gvr,
		name:      u.GetName(),
	}
	for _, res := range rep.Results {
		k := listedKey{policy: res.Policy}
		if len(res.Resources) > 0 {
			k.kind, k.name = res.Resources[0].Kind, res.Resources[0].Name
		}
		st.listed[k] = string(res.Result)
	}
	return st
}

// onEvent registers f, called after each report event with the report's namespace.
func (r *reports) onEvent(f func(ns string, at time.Time)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listeners = append(r.listeners, f)
}

// snapshot returns the summed summaries, the time of the last event and the number of events so far.
func (r *reports) snapshot() (counts, time.Time, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.totals, r.lastEvent, r.events
}

// listed returns the verdict listed for the object in namespace ns by policy, across all of the
// namespace's report chunks, or "" when none is listed.
func (r *reports) listed(ns string, k listedKey) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range r.byName {
		if st.namespace != ns || !st.counted {
			continue
		}
		if v, ok := st.listed[k]; ok {
			return v
		}
	}
	return ""
}

// size returns the number of reports and the sum of their JSON sizes, of every watched API, and how many
// results the followed API's reports list.
func (r *reports) size() (n, bytes, listed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range r.byName {
		n++
		bytes += st.bytes
		if st.counted {
			listed += len(st.listed)
		}
	}
	return n, bytes, listed
}

func (r *reports) errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// waitSettled waits until ready() holds, the summed summaries equal want and no report event arrived for
// quiet. It returns the time of the last event (the moment the reports reached their final state) and whether
// the summaries matched; on timeout it returns the state it has.
func (r *reports) waitSettled(ctx context.Context, ready func() bool, want counts, quiet, timeout time.Duration) (last time.Time, got counts, matched bool) {
	deadline := time.Now().Add(timeout)
	for {
		got, last, _ = r.snapshot()
		if ready() && got == want && !last.IsZero() && time.Since(last) >= quiet {
			return last, got, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return last, got, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
