package scan

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	serversharding "k8s.io/apiserver/pkg/sharding"

	"github.com/celaudit/celaudit/internal/shard"
)

// configMap returns a config map of namespace ns as a watch delivers it.
func configMap(ns, name, rv string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]interface{}{"namespace": ns, "name": name, "uid": ns + "/" + name, "resourceVersion": rv},
	}}
}

// bookmark returns a bookmark as the API server sends it: a resourceVersion (and annotations), no namespace,
// name or UID.
func bookmark(rv string, annotations map[string]interface{}) *unstructured.Unstructured {
	md := map[string]interface{}{"resourceVersion": rv}
	if annotations != nil {
		md["annotations"] = annotations
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md}}
}

// drain reads ch until it is closed, failing after a timeout.
func drain(t *testing.T, ch <-chan watch.Event) []watch.Event {
	t.Helper()
	var out []watch.Event
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("the filtered watch was not closed; received %d events", len(out))
		}
	}
}

// Every member receives every bookmark, also watch-list's end-of-initial-events bookmark, and every error,
// though bookmarks carry no namespace (which would hash as a cluster-scoped object's) nor UID; and each
// object's events reach exactly the member the API server would send them to.
func TestFilteredWatchPassesBookmarksToEveryShard(t *testing.T) {
	const members = 3
	// Spread over the three ranges: every member keeps some objects and drops others.
	namespaces := []string{"default", "kube-system", "payments", "frontend", "backend", "monitoring", "ingress",
		"batch", "data", "ml", "search", "auth"}
	receivedBy := map[string]int{}
	for index := range members {
		l := shard.Layout{Index: index, Count: members}
		server, err := serversharding.Parse(l.Selector().String())
		if err != nil {
			t.Fatal(err)
		}
		in := watch.NewFakeWithChanSize(64, false)
		var want []string
		for i, ns := range namespaces {
			obj := configMap(ns, "cm", fmt.Sprint(10+i))
			in.Add(obj)
			in.Modify(obj)
			if keep, err := server.Matches(obj); err != nil {
				t.Fatal(err)
			} else if keep {
				want = append(want, "ADDED "+ns, "MODIFIED "+ns)
			}
			if i == 3 {
				in.Action(watch.Bookmark, bookmark("13", map[string]interface{}{metav1.InitialEventsAnnotationKey: "true"}))
				want = append(want, "BOOKMARK initial-events-end")
			}
		}
		in.Delete(configMap(namespaces[0], "cm", "30"))
		if keep, _ := server.Matches(configMap(namespaces[0], "cm", "30")); keep {
			want = append(want, "DELETED "+namespaces[0])
		}
		in.Action(watch.Bookmark, bookmark("31", nil))
		in.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired})
		want = append(want, "BOOKMARK 31", "ERROR")
		in.Stop()

		if len(want) == 3 || len(want) == 3+2*len(namespaces)+1 {
			t.Fatalf("member %s keeps all or none of the objects: the test does not exercise the filter", l)
		}
		var got []string
		for _, ev := range drain(t, newFilteredWatch(in, l.Selector()).ResultChan()) {
			switch ev.Type {
			case watch.Bookmark:
				obj := ev.Object.(*unstructured.Unstructured)
				if obj.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					got = append(got, "BOOKMARK initial-events-end")
				} else {
					got = append(got, "BOOKMARK "+obj.GetResourceVersion())
				}
			case watch.Error:
				got = append(got, "ERROR")
			default:
				ns := ev.Object.(*unstructured.Unstructured).GetNamespace()
				got = append(got, string(ev.Type)+" "+ns)
				if ev.Type == watch.Added {
					receivedBy[ns]++
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("member %s received\n %v\nwant\n %v", l, got, want)
		}
	}
	for _, ns := range namespaces {
		if receivedBy[ns] != 1 {
			t.Errorf("the objects of %s reached %d members, want 1", ns, receivedBy[ns])
		}
	}
}

// Stop ends the filter's goroutine and closes its result channel, also while the filter waits for its
// consumer to take an event or for the next event: no goroutine is left behind.
func TestFilteredWatchStopLeaksNoGoroutine(t *testing.T) {
	sel := shard.Layout{Index: 0, Count: 2}.Selector()
	before := runtime.NumGoroutine()
	const n = 50
	var filters []*filteredWatch
	var inputs []*watch.FakeWatcher
	for i := range n {
		in := watch.NewFakeWithChanSize(4, false)
		if i%2 == 0 {
			// A bookmark the consumer never takes: the filter waits to hand it over.
			in.Action(watch.Bookmark, bookmark("1", nil))
		} // else the filter waits for an event that never comes
		inputs = append(inputs, in)
		filters = append(filters, newFilteredWatch(in, sel))
	}
	if got := runtime.NumGoroutine(); got < before+n {
		t.Fatalf("%d goroutines with %d filters running, %d before: the test cannot see a leak", got, n, before)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for _, f := range filters {
			f.Stop()
			f.Stop() // twice is harmless
		}
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return")
	}
	for i, f := range filters {
		for range f.ResultChan() { // a bookmark may still be buffered: the channel must end
		}
		if !inputs[i].IsStopped() {
			t.Fatalf("filter %d did not stop the watch it filters", i)
		}
	}
	// Stop waits for the goroutines to return; they may be counted until they have exited.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+n/10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after stopping %d filters, %d before", runtime.NumGoroutine(), n, before)
		}
		runtime.Gosched()
	}
}
