package report

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/celaudit/celaudit/internal/audit"
)

// benchResults returns n results spread over 50 namespaces, a fifth of them violations, as a large
// cluster's audit gives.
func benchResults(n int) []audit.Result {
	verdicts := []audit.Verdict{audit.Pass, audit.Pass, audit.Fail, audit.Pass, audit.Pass}
	out := make([]audit.Result, n)
	for i := range out {
		out[i] = newResult(
			withObject(fmt.Sprintf("ns-%02d", i%50), fmt.Sprintf("w-%06d", i)),
			withVerdict(verdicts[i%len(verdicts)]),
			withMessage(fmt.Sprintf("replicas must be positive, got -%d", i)),
		)
	}
	return out
}

func BenchmarkBuild10k(b *testing.B) {
	results := benchResults(10_000)
	previous := PreviousTimestamps(BuildCounted(results, nil, nil, scanTime(), Options{}))
	b.ReportAllocs()
	for b.Loop() {
		BuildCounted(results, nil, previous, scanTime(), Options{})
	}
}

func BenchmarkBuild10kViolationsOneNamespace(b *testing.B) {
	results := manyResults("team-a", 10_000)
	b.ReportAllocs()
	for b.Loop() {
		BuildCounted(results, nil, nil, scanTime(), Options{MaxResultsPerReport: 1000})
	}
}

func BenchmarkDiffUnchanged10k(b *testing.B) {
	opts := listingPasses()
	desired := BuildCounted(benchResults(10_000), nil, nil, scanTime(), opts)
	existing := stored(desired)
	b.ReportAllocs()
	for b.Loop() {
		if !Diff(desired, existing).Empty() {
			b.Fatal("unchanged reports produced writes")
		}
	}
}

func BenchmarkBuild100k(b *testing.B) {
	results := benchResults(100_000)
	previous := PreviousTimestamps(BuildCounted(results, nil, nil, scanTime(), Options{}))
	b.ReportAllocs()
	for b.Loop() {
		BuildCounted(results, nil, previous, scanTime(), Options{})
	}
}

// BenchmarkCachedRetained reports the heap the operator's report cache retains per listed result: the
// reports of 5,000 listed results, in chunks of 32, as ForCache leaves them.
func BenchmarkCachedRetained(b *testing.B) {
	const listed = 5000
	var results []audit.Result
	for i := range listed {
		results = append(results, newResult(
			withObject(fmt.Sprintf("ns-%02d", i%100), fmt.Sprintf("w-%06d", i)),
			withVerdict(audit.Fail),
			withMessage(fmt.Sprintf("replicas must be positive, got -%d", i)),
		))
	}
	stored := stored(BuildCounted(results, nil, nil, scanTime(), Options{MaxResultsPerReport: 32}))
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var kept []any
		for i := range stored.PolicyReports {
			c, err := ForCache(stored.PolicyReports[i].DeepCopy())
			if err != nil {
				b.Fatal(err)
			}
			kept = append(kept, c)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/listed, "B/result")
		runtime.KeepAlive(kept)
	}
}
