package whatif

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/listjson"
)

// DefaultPageSize is the limit of each LIST a run makes when Options gives none: the operator's.
const DefaultPageSize = 500

// Lister reads one LIST page of a resource, everywhere when namespace is empty (scan.Client does, decoding
// each item only when it is used).
type Lister interface {
	List(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*listjson.Page, error)
}

// ReadError is a failure to read the cluster's objects: nothing about the proposal can be said.
type ReadError struct {
	Resource schema.GroupVersionResource
	Err      error
}

func (e *ReadError) Error() string { return fmt.Sprintf("listing %s: %v", e.Resource, e.Err) }
func (e *ReadError) Unwrap() error { return e.Err }

// Options tune a run.
type Options struct {
	// Workers evaluate the objects of a page concurrently; default GOMAXPROCS.
	Workers int
	// PageSize is the limit of each LIST; default DefaultPageSize.
	PageSize int64
	// List holds the verdicts whose results are kept whole (for rows and reports); the others are only
	// counted. Passes are kept only when listed, so that memory does not grow with the objects read.
	List []audit.Verdict
	// Mutations keeps, for each stored object the proposed MutatingAdmissionPolicies would change, the object
	// and the patch (Outcome.Mutations): memory then grows with the objects changed.
	Mutations bool
}

// Run reads, page by page, every stored object some pair covers and evaluates it under each pair's policy
// today and under the proposal. served tells which resources the cluster serves: a version that a proposed
// CRD serves and the cluster does not yet is read in a version the cluster serves and converted, as the API
// server will serve it once the CRD is applied (see planReads; Outcome.Notes says what could not be read).
// At most one page is read ahead of the workers, so memory holds two pages and the kept results, whatever
// the number of objects.
func Run(ctx context.Context, lister Lister, served func(schema.GroupVersionResource) bool, pairs []*Pair, opts Options) (*Outcome, error) {
	opts.Workers = cmp.Or(opts.Workers, runtime.GOMAXPROCS(0))
	opts.PageSize = cmp.Or(opts.PageSize, DefaultPageSize)
	idx := newIndex(pairs)
	out := newOutcome(pairs, opts.List)
	out.keepMutations = opts.Mutations
	reads, notes := planReads(pairs, idx.resources, served)
	out.versionNotes = notes
	for _, gvr := range idx.resources {
		r, ok := reads[gvr]
		if !ok {
			continue
		}
		if err := runResource(ctx, lister, gvr, r, idx.byGVR[gvr], opts, out); err != nil {
			return nil, err
		}
	}
	out.finish()
	return out, nil
}

// coverage is a pair with the resources its two policies cover.
type coverage struct {
	pair     *Pair
	today    bool // Today covers the resource
	proposed bool // Proposed covers the resource
}

type index struct {
	resources []schema.GroupVersionResource // sorted
	byGVR     map[schema.GroupVersionResource][]coverage
}

// side is one of a pair's two policies. Both sides of every pair go into one engine.Set, which tells which
// cover each resource; the sides tell which pair, and which of its policies, that is.
type side struct {
	audit.Policy
	pair     *Pair
	proposed bool
}

// newIndex returns, for each resource some pair's policy covers, the pairs covering it, in key order.
func newIndex(pairs []*Pair) index {
	sides := make([]audit.Policy, 0, 2*len(pairs))
	for _, p := range pairs {
		if p.Today != nil {
			sides = append(sides, side{Policy: p.Today, pair: p})
		}
		sides = append(sides, side{Policy: p.Proposed, pair: p, proposed: true})
	}
	set := engine.NewSet(sides...)
	idx := index{resources: set.Resources(), byGVR: map[schema.GroupVersionResource][]coverage{}}
	for _, gvr := range idx.resources {
		var covs []coverage
		at := map[*Pair]int{} // index of each pair's coverage in covs
		for _, pol := range set.For(gvr) {
			s := pol.(side) // the set holds sides only
			i, ok := at[s.pair]
			if !ok {
				i = len(covs)
				at[s.pair] = i
				covs = append(covs, coverage{pair: s.pair})
			}
			if s.proposed {
				covs[i].proposed = true
			} else {
				covs[i].today = true
			}
		}
		idx.byGVR[gvr] = covs
	}
	return idx
}

// runResource lists gvr (through r) page by page; while workers evaluate a page's items, the next page is read.
func runResource(ctx context.Context, lister Lister, gvr schema.GroupVersionResource, r readPlan, covs []coverage, opts Options, out *Outcome) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan *listjson.Page) // unbuffered: the reader is at most one page ahead
	readErr := make(chan error, 1)
	go func() {
		defer close(pages)
		listOpts := metav1.ListOptions{Limit: opts.PageSize}
		for {
			page, err := lister.List(ctx, r.from, "", listOpts)
			if err != nil {
				readErr <- &ReadError{Resource: r.from, Err: err}
				return
			}
			select {
			case pages <- page:
			case <-ctx.Done():
				return
			}
			if listOpts.Continue = page.List.GetContinue(); listOpts.Continue == "" {
				return
			}
		}
	}()
	for page := range pages {
		if err := evaluatePage(ctx, gvr, page, r.convert, covs, opts.Workers, out); err != nil {
			cancel()
			for range pages { //nolint:revive // drain so that the reader returns
			}
			return err
		}
	}
	select {
	case err := <-readErr:
		return err
	default:
		return nil
	}
}

// evaluatePage evaluates the page's items, read at gvr (after convert, when not nil), with workers, each
// decoding its own items.
func evaluatePage(ctx context.Context, gvr schema.GroupVersionResource, page *listjson.Page, convert convertFunc, covs []coverage, workers int, out *Outcome) error {
	n := page.Len()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	next := make(chan int)
	for range min(workers, n) {
		wg.Go(func() {
			acc := newAccumulator(out)
			for i := range next {
				obj, err := page.Item(i)
				if err == nil && convert != nil {
					obj, err = convert(obj)
				}
				if err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, error(&ReadError{Resource: gvr, Err: err}))
					mu.Unlock()
					continue
				}
				acc.object(ctx, gvr, obj, covs)
			}
			out.merge(acc)
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return firstErr
}

// objectResults are one pair's results on one object.
type objectResults struct {
	key      audit.PolicyKey
	proposed []audit.Result
	whatif   []string
	onUpdate []string
	fixed    []audit.Result
}

// evaluateObject evaluates obj, prepared as o, under every pair covering gvr and compares the results.
func evaluateObject(ctx context.Context, o engine.Object, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, covs []coverage) []objectResults {
	out := make([]objectResults, 0, len(covs))
	for _, c := range covs {
		var today, proposed []audit.Result
		if c.today {
			today = o.Evaluate(ctx, c.pair.Today)
		}
		if c.proposed {
			proposed = o.Evaluate(ctx, c.pair.Proposed)
		}
		whatif, fixed := Compare(today, proposed)
		r := objectResults{key: c.pair.Key, proposed: proposed, whatif: whatif, fixed: fixed, onUpdate: make([]string, len(proposed))}
		var failIdx []int
		var fails []audit.Result
		for i, res := range proposed {
			if Rejects(res) {
				failIdx = append(failIdx, i)
				fails = append(fails, res)
			}
		}
		if len(fails) > 0 && c.pair.update != nil {
			for j, v := range c.pair.update.onUpdate(ctx, gvr, obj, fails) {
				r.onUpdate[failIdx[j]] = v
			}
		}
		out = append(out, r)
	}
	return out
}

// uidOf is the UID under which an object's passes are counted: its own when it has other results (they
// share a report chunk), none otherwise, so that the counts of passing objects take no memory per object.
func uidOf(obj *unstructured.Unstructured, hasOthers bool) types.UID {
	if hasOthers {
		return obj.GetUID()
	}
	return ""
}
