package results

import (
	"fmt"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
)

// BenchmarkStoreRetained reports the heap the store retains per audited object, for objects that pass four
// policies (the common case) with one failing object in twenty.
func BenchmarkStoreRetained(b *testing.B) {
	const objects = 20000
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	policies := []audit.PolicyKey{audit.VAPKey("a"), audit.VAPKey("b"), audit.VAPKey("c"), audit.CRDKey("d")}
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := NewStore(nil)
		for i := range objects {
			ns := fmt.Sprintf("ns-%d", i%100)
			uid := types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
			ref := audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: fmt.Sprintf("cm-%d", i), UID: uid}
			for _, p := range policies {
				r := audit.Result{Policy: p.Name, Verdict: audit.Pass, Resource: ref, Properties: map[string]string{"binding": p.Name}}
				if i%20 == 0 && p == policies[0] {
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
}
