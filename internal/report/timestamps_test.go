package report

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

func stamped(id string, seconds int64) v1alpha2.PolicyReportResult {
	r := v1alpha2.PolicyReportResult{Policy: "p", Timestamp: metav1.Timestamp{Seconds: seconds}}
	if id != "" {
		r.Properties = map[string]string{audit.PropResultID: id}
	}
	return r
}

func TestPreviousTimestamps(t *testing.T) {
	managed := metav1.ObjectMeta{Name: "celaudit", Namespace: "team-a", Labels: managedLabels()}
	foreign := metav1.ObjectMeta{Name: "kyverno-report", Namespace: "team-a", Labels: map[string]string{ManagedByLabel: "kyverno"}}

	tests := []struct {
		name     string
		existing Reports
		want     map[string]metav1.Timestamp
	}{
		{name: "nothing published", want: map[string]metav1.Timestamp{}},
		{
			name: "results of managed reports of both kinds",
			existing: Reports{
				PolicyReports: []v1alpha2.PolicyReport{{ObjectMeta: managed, Results: []v1alpha2.PolicyReportResult{stamped("a", 10), stamped("b", 20)}}},
				ClusterPolicyReports: []v1alpha2.ClusterPolicyReport{{
					ObjectMeta: metav1.ObjectMeta{Name: "celaudit", Labels: managedLabels()},
					Results:    []v1alpha2.PolicyReportResult{stamped("c", 30)},
				}},
			},
			want: map[string]metav1.Timestamp{"a": {Seconds: 10}, "b": {Seconds: 20}, "c": {Seconds: 30}},
		},
		{
			name: "reports of other tools and results without an ID are ignored",
			existing: Reports{PolicyReports: []v1alpha2.PolicyReport{
				{ObjectMeta: foreign, Results: []v1alpha2.PolicyReportResult{stamped("a", 10)}},
				{ObjectMeta: managed, Results: []v1alpha2.PolicyReportResult{stamped("", 20)}},
			}},
			want: map[string]metav1.Timestamp{},
		},
		{
			name: "an ID published twice keeps the earliest timestamp",
			existing: Reports{PolicyReports: []v1alpha2.PolicyReport{
				{ObjectMeta: managed, Results: []v1alpha2.PolicyReportResult{stamped("a", 50)}},
				{ObjectMeta: managed, Results: []v1alpha2.PolicyReportResult{stamped("a", 10), stamped("a", 30)}},
			}},
			want: map[string]metav1.Timestamp{"a": {Seconds: 10}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PreviousTimestamps(tt.existing)
			if !equality.Semantic.DeepEqual(got, tt.want) {
				t.Errorf("PreviousTimestamps = %v, want %v", got, tt.want)
			}
		})
	}
}
