package report_test

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/report"
)

func Example() {
	// The results of the CRD widgets.example.com on three widgets, as its validation rules report them: a
	// failure names the rule that failed, a pass the whole validation.
	widget := func(name string, v audit.Verdict) audit.Result {
		r := audit.Result{
			Policy:     "widgets.example.com",
			Category:   "CRD Validation",
			Severity:   audit.SeverityMedium,
			Verdict:    v,
			Message:    "object satisfies the validation of widgets.example.com v1",
			Properties: map[string]string{"crdVersion": "v1"},
			Resource: audit.ObjectRef{
				APIVersion: "example.com/v1", Kind: "Widget", Namespace: "team-a", Name: name, UID: types.UID("uid-" + name),
			},
		}
		if v != audit.Pass {
			r.Rule = "spec.replicas.x-kubernetes-validations[0]"
			r.Message = "spec.replicas: Invalid value: -1: replicas must not be negative"
			r.Properties["fieldPath"], r.Properties["reason"], r.Properties["rule"] = "spec.replicas", "FieldValueInvalid", "self >= 0"
		}
		return r
	}
	results := []audit.Result{widget("w1", audit.Fail), widget("w2", audit.Pass), widget("w3", audit.Fail)}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	// First scan: nothing is published yet. Diff takes desired over, so only what it returns is used
	// afterwards.
	desired := report.BuildCounted(results, nil, nil, now, report.Options{})
	changes := report.Diff(desired, report.Reports{})
	var existing report.Reports // what the cluster holds once the creates are written
	for _, r := range changes.PolicyReports.Create {
		fmt.Printf("create %s/%s pass=%d fail=%d listed=%d\n",
			r.Namespace, r.Name, r.Summary.Pass, r.Summary.Fail, len(r.Results))
		existing.PolicyReports = append(existing.PolicyReports, *r.DeepCopy())
	}

	// Next scan, nothing changed: the same reports, so nothing to write.
	again := report.BuildCounted(results, nil, report.PreviousTimestamps(existing), now.Add(time.Hour), report.Options{})
	fmt.Println("writes needed:", !report.Diff(again, existing).Empty())

	// A scan after w2 broke the rule: the existing report is updated.
	results[1] = widget("w2", audit.Fail)
	later := report.BuildCounted(results, nil, report.PreviousTimestamps(existing), now.Add(2*time.Hour), report.Options{})
	for _, r := range report.Diff(later, existing).PolicyReports.Update {
		fmt.Printf("update %s/%s pass=%d fail=%d listed=%d\n",
			r.Namespace, r.Name, r.Summary.Pass, r.Summary.Fail, len(r.Results))
	}

	// Output:
	// create team-a/celaudit pass=1 fail=2 listed=2
	// writes needed: false
	// update team-a/celaudit pass=0 fail=3 listed=3
}
