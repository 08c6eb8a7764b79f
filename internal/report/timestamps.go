package report

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

// PreviousTimestamps returns the timestamp of every result published in the reports celaudit owns, keyed
// by the result's resultID property, for BuildCounted to keep. Reports of other tools are ignored. Should
// one ID appear twice, the earliest timestamp wins, so the answer does not depend on the order of reports.
func PreviousTimestamps(existing Reports) map[string]metav1.Timestamp {
	out := make(map[string]metav1.Timestamp)
	add := func(id string, ts metav1.Timestamp) {
		if old, ok := out[id]; ok && !before(ts, old) {
			return
		}
		out[id] = ts
	}
	addAll := func(meta *metav1.ObjectMeta, results []v1alpha2.PolicyReportResult) {
		if !IsManaged(meta) || cachedTimestamps(meta, add) {
			return
		}
		for i := range results {
			if id := results[i].Properties[audit.PropResultID]; id != "" {
				add(id, results[i].Timestamp)
			}
		}
	}
	for i := range existing.PolicyReports {
		addAll(&existing.PolicyReports[i].ObjectMeta, existing.PolicyReports[i].Results)
	}
	for i := range existing.ClusterPolicyReports {
		addAll(&existing.ClusterPolicyReports[i].ObjectMeta, existing.ClusterPolicyReports[i].Results)
	}
	return out
}

func before(a, b metav1.Timestamp) bool {
	if a.Seconds != b.Seconds {
		return a.Seconds < b.Seconds
	}
	return a.Nanos < b.Nanos
}
