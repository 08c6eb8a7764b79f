package results

import (
	"fmt"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
)

// BenchmarkStoreRetained reports the heap the store retains per audited object, for objects that pass the
// policies covering them, with one failing object in twenty:
//   - 4 policies: every object passes 4 (the common case: a few VAPs and CRD rules);
//   - 14 policies: 4 and 10 AuditPolicies beside them, as in the macro benchmark with -audit-policies 10, of
//     which each object passes 10 (which 10 depends on its namespace, as with namespace selectors).
func BenchmarkStoreRetained(b *testing.B) {
	cases := []struct {
		name     string
		policies int
		covering int // policies covering each object
	}{
		{name: "4 policies", policies: 4, covering: 4},
		{name: "14 policies, 10 passing", policies: 14, covering: 10},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			const objects = 20000
			gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
			policies := make([]audit.PolicyKey, tc.policies)
			for j := range policies {
				policies[j] = audit.VAPKey(fmt.Sprintf("p%d", j))
			}
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				s := NewStore(nil)
				for i := range objects {
					nsIndex := i % 100
					ns := fmt.Sprintf("ns-%d", nsIndex)
					uid := types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
					ref := audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: fmt.Sprintf("cm-%d", i), UID: uid}
					for k := range tc.covering {
						p := policies[(nsIndex+k)%len(policies)]
						r := audit.Result{Policy: p.Name, Verdict: audit.Pass, Resource: ref, Properties: map[string]string{"binding": p.Name}}
						if i%20 == 0 && k == 0 {
							r.Verdict, r.Message = audit.Fail, "configmaps must name an owner"
						}
						s.Set(p, ObjectKey{GVR: gvr, UID: uid}, ns, []audit.Result{r})
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/objects, "B/object")
				runtime.KeepAlive(s)
			}
		})
	}
}

// BenchmarkSummaries measures Summaries over 100,000 objects in 1,000 namespaces, each covered by four
// policies (one object in twenty fails one of them, one in fifty warns another): the pass the readiness
// component makes after changes settle, and at every scrape of its metrics, under the store's read lock.
//
// Measured on 2 CPUs (AMD EPYC) shared with other builds, load average 3 to 7, with
// `go test ./internal/results/ -run '^$' -bench Summaries -benchtime 50x -count 6`: 5.5 to 12 ms/op (one run
// of eleven at 23 ms), i.e. 55 to 120 ns per object; 6.3 KB and 19 allocations per call (the result map and
// the namespace maps of the two policies with violations).
func BenchmarkSummaries(b *testing.B) {
	const objects = 100000
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	policies := []audit.PolicyKey{audit.VAPKey("a"), audit.VAPKey("b"), audit.VAPKey("c"), audit.CRDKey("d")}
	s := NewStore(nil)
	for i := range objects {
		ns := fmt.Sprintf("ns-%d", i%1000)
		uid := types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		ref := audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: fmt.Sprintf("cm-%d", i), UID: uid}
		for _, p := range policies {
			r := audit.Result{Policy: p.Name, Verdict: audit.Pass, Resource: ref}
			switch {
			case i%20 == 0 && p == policies[0]:
				r.Verdict, r.Message = audit.Fail, "configmaps must name an owner"
			case i%50 == 0 && p == policies[1]:
				r.Verdict, r.Message = audit.Warn, "configmaps should be small"
			}
			s.Set(p, ObjectKey{GVR: gvr, UID: uid}, ns, []audit.Result{r})
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if got := s.Summaries(); got[policies[0]].Fail != objects/20 {
			b.Fatalf("summary of %s: %+v", policies[0], got[policies[0]])
		}
	}
}
