package report

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

// PreviousTimestamps returns the timestamp of every result published in the reports celaudit owns, keyed
// by the result's resultID property, for Build to keep. Reports of other tools are ignored. Should one ID
// appear twice, the earliest timestamp wins, so the answer does not depend on the order of reports.
func PreviousTimestamps(existing Reports) map[string]metav1.Timestamp {
	out := make(map[string]metav1.Timestamp)
	add := func(results []v1alpha2.PolicyReportResult) {
		for i := range results {
			id := results[i].Properties[audit.PropResultID]
			if id == "" {
				continue
			}
			ts := results[i].Timestamp
			if old, ok := out[id]; ok && !before(ts, old) {
				continue
			}
			out[id] = ts
		}
	}
	for i := range existing.PolicyReports {
		if IsManaged(&existing.PolicyReports[i]) {
			add(existing.PolicyReports[i].Results)
		}
	}
	for i := range existing.ClusterPolicyReports {
		if IsManaged(&existing.ClusterPolicyReports[i]) {
			add(existing.ClusterPolicyReports[i].Results)
		}
	}
	return out
}

func before(a, b metav1.Timestamp) bool {
	if a.Seconds != b.Seconds {
		return a.Seconds < b.Seconds
	}
	return a.Nanos < b.Nanos
}
