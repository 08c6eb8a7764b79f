package whatif

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/report"
)

// Summary counts one policy's outcome.
type Summary struct {
	Key audit.PolicyKey
	// Matched is the number of objects the proposed policy evaluated (gave at least one result); an object
	// read in several versions of a CRD counts once per version, as in the operator's counts.
	Matched int
	// New, Fixed and Unchanged count the failing results (fail, warn, error) by their whatif value.
	New, Fixed, Unchanged int
	// NewRejections counts the new results the API server would reject a request for (see Rejects), and
	// NewWarnings the new warn results: what exit codes are decided on.
	NewRejections, NewWarnings int
}

// Row is one listed result: a result under the proposal, or (Whatif fixed, not a pass) a failure of today
// that the proposal no longer gives.
type Row struct {
	Key      audit.PolicyKey
	Result   audit.Result
	Whatif   string
	OnUpdate string // only on results under the proposal that reject (see Rejects)
}

// annotation is what a result gains after its report is built.
type annotation struct {
	whatif, onUpdate string
}

// Outcome is what a run found.
type Outcome struct {
	listed map[audit.Verdict]bool // read only once built

	mu        sync.Mutex
	summaries map[audit.PolicyKey]*Summary
	rows      []Row
	results   []audit.Result        // the proposal's results, but for passes when they are not listed
	passes    report.CountedPasses  // the proposal's unlisted passes
	notes     map[string]annotation // by result ID, for the listed results
	// versionNotes say what the proposal changes about the versions stored objects are read in (see planReads).
	versionNotes []string
	// pairNotes say what the results of some pairs cannot show (see Pair.note).
	pairNotes []string
	// keepMutations says to keep mutations (see Options.Mutations).
	keepMutations bool
	mutations     []Mutation
}

func newOutcome(pairs []*Pair, list []audit.Verdict) *Outcome {
	o := &Outcome{summaries: map[audit.PolicyKey]*Summary{}, passes: report.CountedPasses{}, notes: map[string]annotation{},
		listed: map[audit.Verdict]bool{}}
	for _, p := range pairs {
		o.summaries[p.Key] = &Summary{Key: p.Key}
		if p.note != "" {
			o.pairNotes = append(o.pairNotes, p.note)
		}
	}
	for _, v := range list {
		o.listed[v] = true
	}
	return o
}

func (o *Outcome) isListed(v audit.Verdict) bool { return o.listed[v] }

// accumulator collects one worker's findings, merged into the outcome once the worker is done, so that
// workers do not contend for the outcome's lock per object.
type accumulator struct {
	out       *Outcome
	summaries map[audit.PolicyKey]*Summary
	rows      []Row
	results   []audit.Result
	passes    map[string]map[string]int // namespace -> uid -> passes
	notes     map[string]annotation
	mutations []Mutation
}

func newAccumulator(out *Outcome) *accumulator {
	return &accumulator{out: out, summaries: map[audit.PolicyKey]*Summary{}, passes: map[string]map[string]int{}, notes: map[string]annotation{}}
}

func (a *accumulator) summary(key audit.PolicyKey) *Summary {
	s := a.summaries[key]
	if s == nil {
		s = &Summary{Key: key}
		a.summaries[key] = s
	}
	return s
}

// object evaluates one object and keeps what the outcome needs of it.
func (a *accumulator) object(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, covs []coverage) {
	o := engine.NewObject(gvr, obj)
	evaluated := evaluateObject(ctx, o, gvr, obj, covs)
	if a.out.keepMutations {
		if m, ok := mutationOf(ctx, o, gvr, obj, covs); ok {
			a.mutations = append(a.mutations, m)
		}
	}
	hasOthers := false
	for _, e := range evaluated {
		for _, r := range e.proposed {
			hasOthers = hasOthers || r.Verdict != audit.Pass
		}
	}
	for _, e := range evaluated {
		s := a.summary(e.key)
		if len(e.proposed) > 0 {
			s.Matched++
		}
		for i, r := range e.proposed {
			if failing(r.Verdict) {
				switch e.whatif[i] {
				case WhatifNew:
					s.New++
					if Rejects(r) {
						s.NewRejections++
					}
					if r.Verdict == audit.Warn {
						s.NewWarnings++
					}
				case WhatifUnchanged:
					s.Unchanged++
				}
			}
			listed := a.out.isListed(r.Verdict)
			if r.Verdict == audit.Pass && !listed {
				uid := string(uidOf(obj, hasOthers))
				if a.passes[r.Resource.Namespace] == nil {
					a.passes[r.Resource.Namespace] = map[string]int{}
				}
				a.passes[r.Resource.Namespace][uid]++
				continue
			}
			a.results = append(a.results, r)
			if listed {
				a.notes[r.ID()] = annotation{whatif: e.whatif[i], onUpdate: e.onUpdate[i]}
				a.rows = append(a.rows, Row{Key: e.key, Result: r, Whatif: e.whatif[i], OnUpdate: e.onUpdate[i]})
			}
		}
		for _, r := range e.fixed {
			s.Fixed++
			if a.out.isListed(r.Verdict) {
				a.rows = append(a.rows, Row{Key: e.key, Result: r, Whatif: WhatifFixed})
			}
		}
	}
}

func (o *Outcome) merge(a *accumulator) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, s := range a.summaries {
		t := o.summaries[key]
		t.Matched += s.Matched
		t.New += s.New
		t.Fixed += s.Fixed
		t.Unchanged += s.Unchanged
		t.NewRejections += s.NewRejections
		t.NewWarnings += s.NewWarnings
	}
	o.rows = append(o.rows, a.rows...)
	o.results = append(o.results, a.results...)
	for ns, byUID := range a.passes {
		if o.passes[ns] == nil {
			o.passes[ns] = map[types.UID]int{}
		}
		for uid, n := range byUID {
			o.passes[ns][types.UID(uid)] += n
		}
	}
	for id, n := range a.notes {
		o.notes[id] = n
	}
	o.mutations = append(o.mutations, a.mutations...)
}

// finish sorts the rows: by policy, object, whatif (new first), rule and message.
func (o *Outcome) finish() {
	order := map[string]int{WhatifNew: 0, WhatifUnchanged: 1, WhatifFixed: 2}
	slices.SortFunc(o.rows, func(a, b Row) int {
		ra, rb := a.Result.Resource, b.Result.Resource
		return cmp.Or(
			a.Key.Compare(b.Key),
			cmp.Compare(ra.Namespace, rb.Namespace),
			cmp.Compare(ra.Name, rb.Name),
			cmp.Compare(ra.Kind, rb.Kind),
			cmp.Compare(ra.APIVersion, rb.APIVersion),
			cmp.Compare(order[a.Whatif], order[b.Whatif]),
			cmp.Compare(a.Result.Rule, b.Result.Rule),
			cmp.Compare(a.Result.Message, b.Result.Message),
			cmp.Compare(string(a.Result.Verdict), string(b.Result.Verdict)),
			strings.Compare(a.Result.Properties[audit.PropBinding], b.Result.Properties[audit.PropBinding]),
			strings.Compare(a.Result.Properties[audit.PropParam], b.Result.Properties[audit.PropParam]),
		)
	})
	slices.SortFunc(o.mutations, func(a, b Mutation) int {
		return cmp.Or(
			cmp.Compare(a.Object.GetNamespace(), b.Object.GetNamespace()),
			cmp.Compare(a.Object.GetName(), b.Object.GetName()),
			cmp.Compare(a.Object.GetKind(), b.Object.GetKind()),
			cmp.Compare(a.Object.GetAPIVersion(), b.Object.GetAPIVersion()),
		)
	})
}

// Mutations returns the stored objects the proposed MutatingAdmissionPolicies would change, with the patch of
// each, sorted by namespace, name and kind; none unless Options.Mutations asked for them.
func (o *Outcome) Mutations() []Mutation { return o.mutations }

// Summaries returns the counts of each policy, sorted by key.
func (o *Outcome) Summaries() []Summary {
	out := make([]Summary, 0, len(o.summaries))
	for _, s := range o.summaries {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Summary) int { return a.Key.Compare(b.Key) })
	return out
}

// Rows returns the listed results, sorted by policy, object, whatif, rule and message.
func (o *Outcome) Rows() []Row { return o.rows }

// Notes says what the proposal changes about the versions the stored objects are read in that the results
// do not show: a version objects are stored in that it stops serving, a version it serves whose objects
// could not be evaluated.
func (o *Outcome) Notes() []string { return append(slices.Clone(o.versionNotes), o.pairNotes...) }

// Reports returns the reports the operator would write for the proposed policies once the proposal is
// applied: built by report.BuildCounted from the proposal's results, as the operator builds them, so that
// names, result IDs, messages and summaries are the operator's; then each listed result gains the whatif
// and onUpdate properties (after the build, so that its resultID stays the operator's).
//
// One difference is kept on purpose: the passes of objects with no other result are counted per namespace,
// not per object, so that memory does not grow with the objects read. In a namespace whose report the
// operator would split into chunks, they are summed in one chunk rather than spread over the chunks of their
// objects; the namespace's totals are the same.
func (o *Outcome) Reports(now time.Time, opts report.Options) report.Reports {
	reports := report.BuildCounted(o.results, o.passes, nil, now, opts)
	annotate := func(results []v1alpha2.PolicyReportResult) {
		for i := range results {
			props := results[i].Properties
			n, ok := o.notes[props[audit.PropResultID]]
			if !ok {
				continue
			}
			props[PropWhatif] = n.whatif
			if n.onUpdate != "" {
				props[PropOnUpdate] = n.onUpdate
			}
		}
	}
	for i := range reports.ClusterPolicyReports {
		annotate(reports.ClusterPolicyReports[i].Results)
	}
	for i := range reports.PolicyReports {
		annotate(reports.PolicyReports[i].Results)
	}
	return reports
}
