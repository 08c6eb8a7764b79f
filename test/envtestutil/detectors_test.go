package envtestutil

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/consistencydetector"
)

// detectorChildEnv names the fault a child process of TestConsistencyDetectors commits.
const detectorChildEnv = "CELAUDIT_DETECTOR_FAULT"

// TestConsistencyDetectors checks that client-go's consistency detectors, which make test turns on for every
// test binary, catch what they are there to catch: an informer's cached object mutated, and a watch-list stream
// that differs from a LIST at the same resourceVersion. Each fault is committed in a child process of this test
// binary, started with the detectors' variables set as make test sets them (client-go reads them once, when a
// process starts), and must kill it with the detector's panic.
func TestConsistencyDetectors(t *testing.T) {
	if fault := os.Getenv(detectorChildEnv); fault != "" {
		commitFault(t, fault)
		return
	}
	if os.Getenv("KUBE_WATCHLIST_INCONSISTENCY_DETECTOR") == "true" && !consistencydetector.IsDataConsistencyDetectionForWatchListEnabled() {
		t.Errorf("KUBE_WATCHLIST_INCONSISTENCY_DETECTOR is set but client-go's detector is off")
	}
	for fault, want := range map[string]string{
		"mutation":  "cache *v1.ConfigMap modified",
		"watchlist": "data inconsistency detected",
	} {
		t.Run(fault, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestConsistencyDetectors$", "-test.count=1")
			cmd.Env = append(os.Environ(), detectorChildEnv+"="+fault,
				"KUBE_CACHE_MUTATION_DETECTOR=true", "KUBE_WATCHLIST_INCONSISTENCY_DETECTOR=true")
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), want) {
				t.Fatalf("the child process ended with %v, want a panic %q; its output:\n%s", err, want, out)
			}
		})
	}
}

// commitFault runs an informer over a ListWatch that serves one ConfigMap and commits fault; the detector must
// end the process before the deadline.
func commitFault(t *testing.T, fault string) {
	stored := func(name string) corev1.ConfigMap {
		return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "2"},
			Data: map[string]string{"k": "v"}}
	}
	var lw cache.ListerWatcher
	switch fault {
	case "mutation":
		lw = listOnly{&cache.ListWatch{
			ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
				return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "2"}, Items: []corev1.ConfigMap{stored("a")}}, nil
			},
			WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
		}}
	case "watchlist":
		// The stream gives ConfigMap a; a LIST at the same resourceVersion gives ConfigMap b.
		lw = &cache.ListWatch{
			ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
				return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "2"}, Items: []corev1.ConfigMap{stored("b")}}, nil
			},
			WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
				w := watch.NewFakeWithChanSize(2, false)
				a := stored("a")
				w.Add(&a)
				w.Action(watch.Bookmark, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "2",
					Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
				return w, nil
			},
		}
	default:
		t.Fatalf("unknown fault %q", fault)
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	if fault == "mutation" {
		obj, ok, err := inf.GetStore().GetByKey("ns/a")
		if err != nil || !ok {
			t.Fatalf("ConfigMap ns/a not cached: %v", err)
		}
		obj.(*corev1.ConfigMap).Data["k"] = "mutated"
	}
	// The mutation detector compares the cache with its copies every second.
	<-time.After(30 * time.Second)
	t.Fatalf("no detector ended the process after the %s fault", fault)
}

// listOnly is a ListerWatcher that does not support watch-list streams: the informer LISTs, then watches.
type listOnly struct{ *cache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }
