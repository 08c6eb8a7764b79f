package report_test

import (
	"fmt"
	"time"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/report"
)

func Example() {
	widget := func(name string, v audit.Verdict) audit.Result {
		return audit.Result{
			Policy:  "crd/widgets.example.com",
			Rule:    "spec.replicas",
			Verdict: v,
			Message: "replicas must be positive",
			Resource: audit.ObjectRef{
				APIVersion: "example.com/v1", Kind: "Widget", Namespace: "team-a", Name: name,
			},
		}
	}
	results := []audit.Result{widget("w1", audit.Fail), widget("w2", audit.Pass), widget("w3", audit.Fail)}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	// First scan: nothing is published yet.
	desired := report.Build(results, nil, now, report.Options{})
	changes := report.Diff(desired, report.Reports{})
	for _, r := range changes.PolicyReports.Create {
		fmt.Printf("create %s/%s pass=%d fail=%d listed=%d\n",
			r.Namespace, r.Name, r.Summary.Pass, r.Summary.Fail, len(r.Results))
	}

	// Next scan, nothing changed: the same reports, so nothing to write.
	existing := desired
	again := report.Build(results, report.PreviousTimestamps(existing), now.Add(time.Hour), report.Options{})
	fmt.Println("writes needed:", !report.Diff(again, existing).Empty())

	// Output:
	// create team-a/celaudit pass=1 fail=2 listed=2
	// writes needed: false
}
