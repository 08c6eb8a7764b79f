package report

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/crdrules"
)

// scanTime is the injected clock of the tests; its nanoseconds check that timestamps are truncated.
func scanTime() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 500_000_000, time.UTC) }

// listingPasses lists passes besides the default verdicts, as the operator does when it is told to list passes.
func listingPasses() Options {
	return Options{ListVerdicts: append(DefaultListVerdicts(), audit.Pass)}
}

type resultOption func(*audit.Result)

// newResult builds a failing result of a CRD rule on a namespaced Widget, adjusted by opts: shaped as the
// results of internal/crdrules, named by the CRD and its rule's schema path and index, in that source's category.
func newResult(opts ...resultOption) audit.Result {
	r := audit.Result{
		Policy:   "widgets.example.com",
		Rule:     "spec.replicas.x-kubernetes-validations[0]",
		Category: crdrules.DefaultCategory,
		Severity: audit.SeverityMedium,
		Verdict:  audit.Fail,
		Message:  "replicas must be positive",
		Properties: map[string]string{
			audit.PropCRDVersion: "v1",
			audit.PropFieldPath:  "spec.replicas",
		},
	}
	withObject("team-a", "w1")(&r)
	for _, o := range opts {
		o(&r)
	}
	return r
}

// withObject sets the audited Widget; an empty namespace makes it cluster-scoped.
func withObject(namespace, name string) resultOption {
	return func(r *audit.Result) {
		r.Resource = audit.ObjectRef{
			APIVersion: "example.com/v1",
			Kind:       "Widget",
			Namespace:  namespace,
			Name:       name,
			UID:        types.UID(fmt.Sprintf("uid-%s-%s", namespace, name)),
		}
	}
}

func withKind(apiVersion, kind string) resultOption {
	return func(r *audit.Result) { r.Resource.APIVersion, r.Resource.Kind = apiVersion, kind }
}

func withVerdict(v audit.Verdict) resultOption { return func(r *audit.Result) { r.Verdict = v } }

func withPolicy(p string) resultOption { return func(r *audit.Result) { r.Policy = p } }

func withRule(rule string) resultOption { return func(r *audit.Result) { r.Rule = rule } }

func withMessage(m string) resultOption { return func(r *audit.Result) { r.Message = m } }

func withSeverity(s string) resultOption { return func(r *audit.Result) { r.Severity = s } }

func withProperty(k, v string) resultOption {
	return func(r *audit.Result) { r.Properties[k] = v }
}

// manyResults returns n results on distinct objects of one namespace, cycling through the given verdicts.
func manyResults(namespace string, n int, verdicts ...audit.Verdict) []audit.Result {
	if len(verdicts) == 0 {
		verdicts = []audit.Verdict{audit.Fail}
	}
	out := make([]audit.Result, n)
	for i := range out {
		out[i] = newResult(
			withObject(namespace, fmt.Sprintf("w-%06d", i)),
			withVerdict(verdicts[i%len(verdicts)]),
			withMessage(fmt.Sprintf("replicas must be positive, got -%d", i)),
		)
	}
	return out
}

// withPassesAlongside returns results followed by passes of other rules on the same objects: i%cycle passes on
// the object of results[i], so that objects differ in their number of passes.
func withPassesAlongside(results []audit.Result, cycle int) []audit.Result {
	out := slices.Clone(results)
	for i, r := range results {
		for j := range i % cycle {
			out = append(out, newResult(
				withObject(r.Resource.Namespace, r.Resource.Name),
				withKind(r.Resource.APIVersion, r.Resource.Kind),
				withRule(fmt.Sprintf("spec.check-%d", j)),
				withVerdict(audit.Pass),
				withMessage(""),
			))
		}
	}
	return out
}
