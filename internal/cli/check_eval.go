package cli

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/admit"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/manifests"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/report"
)

// evalOptions tune the evaluation pass.
type evalOptions struct {
	workers   int
	namespace string          // of namespaced objects that name none
	list      []audit.Verdict // verdicts whose results are kept
	// mutations keeps the patch of each object the MutatingAdmissionPolicies would change (check --mutate).
	mutations bool
}

// policyCounts are the counts of one policy's results.
type policyCounts struct {
	objects  int // objects the policy gave at least one result for
	verdicts map[audit.Verdict]int
}

// objectKey identifies a judged object in the results.
type objectKey struct {
	apiVersion, kind, namespace, name string
}

func keyOf(r audit.ObjectRef) objectKey {
	return objectKey{apiVersion: r.APIVersion, kind: r.Kind, namespace: r.Namespace, name: r.Name}
}

// tally is what the evaluation keeps: counts, the listed results, the passes only counted, and where the
// objects with listed results were read. Nothing grows with the objects that pass.
type tally struct {
	objects        int
	unmatched      int // objects no policy gave a result for
	builtinMatched int // built-in objects some policy gave a result for
	byPolicy       map[audit.PolicyKey]*policyCounts
	listed         []audit.Result
	listedKeys     []audit.PolicyKey // of the policy of each listed result
	passes         report.CountedPasses
	sources        map[objectKey]manifests.Source
	failure        *recordError // the first bad object, in input order
	// missingParams counts the error results of bindings that found no params, by binding and namespace.
	missingParams map[missingParams]int
	// mutations holds, by the order of the object in the inputs, the patch that turns each object the
	// MutatingAdmissionPolicies would change into the object they leave (evalOptions.mutations).
	mutations map[int][]mutate.Operation
}

// missingParams names a binding that found no params for the objects of a namespace.
type missingParams struct {
	policy    audit.PolicyKey
	binding   string
	namespace string
}

// noParams is the API server's message for a binding whose paramRef picks nothing, under
// parameterNotFoundAction Deny (k8s.io/apiserver .../policy/generic/policy_dispatcher.go).
const noParams = "no params found for policy binding with `Deny` parameterNotFoundAction"

type recordError struct {
	seq int
	err error
}

func newTally() *tally {
	return &tally{byPolicy: map[audit.PolicyKey]*policyCounts{}, passes: report.CountedPasses{}, sources: map[objectKey]manifests.Source{},
		missingParams: map[missingParams]int{}, mutations: map[int][]mutate.Operation{}}
}

func (t *tally) counts(k audit.PolicyKey) *policyCounts {
	c := t.byPolicy[k]
	if c == nil {
		c = &policyCounts{verdicts: map[audit.Verdict]int{}}
		t.byPolicy[k] = c
	}
	return c
}

func (t *tally) fail(seq int, err error) {
	if t.failure == nil || seq < t.failure.seq {
		t.failure = &recordError{seq: seq, err: err}
	}
}

// merge adds o to t.
func (t *tally) merge(o *tally) {
	t.objects += o.objects
	t.unmatched += o.unmatched
	t.builtinMatched += o.builtinMatched
	for k, c := range o.byPolicy {
		tc := t.counts(k)
		tc.objects += c.objects
		for v, n := range c.verdicts {
			tc.verdicts[v] += n
		}
	}
	t.listed = append(t.listed, o.listed...)
	t.listedKeys = append(t.listedKeys, o.listedKeys...)
	for ns, byUID := range o.passes {
		if t.passes[ns] == nil {
			t.passes[ns] = map[types.UID]int{}
		}
		for uid, n := range byUID {
			t.passes[ns][uid] += n
		}
	}
	for k, s := range o.sources {
		if prev, ok := t.sources[k]; !ok || lessSource(s, prev) {
			t.sources[k] = s
		}
	}
	if o.failure != nil {
		t.fail(o.failure.seq, o.failure.err)
	}
	for k, n := range o.missingParams {
		t.missingParams[k] += n
	}
	maps.Copy(t.mutations, o.mutations)
}

func lessSource(a, b manifests.Source) bool {
	if c := strings.Compare(a.File, b.File); c != 0 {
		return c < 0
	}
	return a.Line < b.Line
}

// evaluate judges every spooled object with rs, with opts.workers workers each keeping its own tally, and
// returns their sum. An object the API server would not decode is bad input, the first one in input order
// reported.
func evaluate(ctx context.Context, in *checkInputs, rs *ruleSet, opts evalOptions) (*tally, error) {
	workers := max(opts.workers, 1)
	records := make(chan record, 4*workers)
	tallies := make([]*tally, workers)
	var wg sync.WaitGroup
	for i := range tallies {
		t := newTally()
		tallies[i] = t
		wg.Go(func() {
			for r := range records {
				judge(ctx, rs, opts, t, r)
			}
		})
	}
	err := in.each(nil, func(r record) error {
		select {
		case records <- r:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	close(records)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	out := newTally()
	for _, t := range tallies {
		out.merge(t)
	}
	if out.failure != nil {
		return nil, BadInput("%w", out.failure.err)
	}
	return out, nil
}

// judge evaluates one object as the API server would judge its CREATE, and adds the outcome to t. The API
// server refuses a body over its size limit unread (see check_limits.go): that is the object's only result.
// Otherwise it runs mutating admission first, then validates the object as mutating admission leaves it:
// the MutatingAdmissionPolicies among the policies are evaluated on the object as written, every other
// policy (CRD schemas and rules, ValidatingAdmissionPolicies, AuditPolicies) and the data limit on the
// object as the MutatingAdmissionPolicies leave it. When a MutatingAdmissionPolicy with failurePolicy Fail
// fails, the API server refuses the request before any validation: its error is the object's only result.
func judge(ctx context.Context, rs *ruleSet, opts evalOptions, t *tally, r record) {
	t.objects++
	if refused := requestTooLarge(rs, opts, r); refused != nil {
		t.add(limitsKey, []audit.Result{*refused}, r.src, opts.list)
		return
	}
	res, err := rs.views.Resources.ResourceForKind(r.kind)
	if err != nil {
		t.unmatched++ // an AuditPolicy without its CRD: a rule, not an object to judge (see checkKinds)
		return
	}
	policies := rs.set.For(res.Resource)
	// Data add up to at most the JSON that holds them: smaller objects need no count, unless a
	// MutatingAdmissionPolicy changes them.
	dataLimited := len(r.data) > admit.MaxDataBytes && admit.HasDataLimit(r.kind)
	if len(policies) == 0 && !dataLimited {
		t.unmatched++ // not even decoded
		return
	}
	// Decoded and prepared in one step: a built-in object goes straight into its Go type.
	prepared, err := rs.preparer.PrepareJSON(r.kind, r.data)
	if err != nil {
		t.fail(r.seq, &manifests.Error{Source: r.src, Err: err})
		return
	}
	// The namespace is set after preparing, which does not read it.
	if !res.Namespaced {
		prepared.SetNamespace("")
	} else if prepared.GetNamespace() == "" {
		prepared.SetNamespace(opts.namespace)
	}
	mutating, validating := splitMutating(policies)
	o := engine.NewObject(res.Resource, prepared)
	matched := t.addAll(ctx, o, mutating, nil, r.src, opts.list)
	validated, o, refused := t.mutated(ctx, o, prepared, res.Resource, mutating, opts, r.seq)
	if refused {
		t.judged(rs, r, true) // refused by mutating admission: no validation runs
		return
	}
	if validated != prepared {
		dataLimited = admit.HasDataLimit(r.kind) // the data may have grown
	}
	if dataLimited {
		if tooLong, size := admit.DataTooLong(validated); tooLong != nil {
			t.add(limitsKey, []audit.Result{sizeResult(audit.RefOf(validated), ruleData, tooLong.Error(), size)}, r.src, opts.list)
			if matched {
				t.judged(rs, r, true)
			}
			return
		}
	}
	// A Secret's values as written are redacted too: the policies may have moved them where the mutated
	// object's redactor (see engine.NewObject) does not look.
	var written *audit.Redactor
	if validated != prepared && res.Resource.Group == "" && res.Resource.Resource == "secrets" {
		written = audit.NewSecretRedactor(prepared.Object)
	}
	matched = t.addAll(ctx, o, validating, written, r.src, opts.list) || matched
	t.judged(rs, r, matched)
}

// mutated returns the object to validate, prepared as the MutatingAdmissionPolicies among mutating leave it
// (prepared itself when they leave it as it is), with o its Object, or refused when they would fail the request.
// With opts.mutations, it keeps the patch of the object in t.
func (t *tally) mutated(ctx context.Context, o engine.Object, prepared *unstructured.Unstructured, gvr schema.GroupVersionResource,
	mutating []audit.Policy, opts evalOptions, seq int) (*unstructured.Unstructured, engine.Object, bool) {
	if len(mutating) == 0 {
		return prepared, o, false
	}
	outcome, _ := o.Mutation(ctx, mutating[0]) // one chain: the first one's evaluation is every one's
	if outcome.Denied != "" {
		return nil, o, true
	}
	if opts.mutations && len(outcome.Patch) > 0 {
		t.mutations[seq] = outcome.Patch
	}
	mutated := outcome.Object()
	if mutated == nil {
		return prepared, o, false
	}
	// A new Object: its redactor is built from the mutated object, whose Secret values the policies may set.
	return mutated, engine.NewObject(gvr, mutated), false
}

// splitMutating returns the MutatingAdmissionPolicies among policies and the others, each in their order.
func splitMutating(policies []audit.Policy) (mutating, validating []audit.Policy) {
	for _, p := range policies {
		if p.Key().Source == audit.SourceMAP {
			mutating = append(mutating, p)
		} else {
			validating = append(validating, p)
		}
	}
	return mutating, validating
}

// addAll adds the results of policies on o, read at src, redacted by red (nil: by o's own only), and reports
// whether any policy gave one.
func (t *tally) addAll(ctx context.Context, o engine.Object, policies []audit.Policy, red *audit.Redactor, src manifests.Source,
	list []audit.Verdict) bool {
	matched := false
	for _, p := range policies {
		results := o.Evaluate(ctx, p)
		if len(results) == 0 {
			continue
		}
		red.Redact(results)
		matched = true
		t.add(p.Key(), results, src, list)
	}
	return matched
}

// judged counts a decoded object that some policy gave a result for (matched), or none.
func (t *tally) judged(rs *ruleSet, r record, matched bool) {
	if !matched {
		t.unmatched++
		return
	}
	if rs.preparer.Builtin(r.kind) {
		t.builtinMatched++
	}
}

// add counts the results of the policy key on one object, read at src, and keeps those listed.
func (t *tally) add(key audit.PolicyKey, results []audit.Result, src manifests.Source, list []audit.Verdict) {
	c := t.counts(key)
	c.objects++
	for _, result := range results {
		c.verdicts[result.Verdict]++
		if result.Verdict == audit.Error && strings.HasSuffix(result.Message, noParams) {
			t.missingParams[missingParams{policy: key, binding: result.Properties[audit.PropBinding], namespace: result.Resource.Namespace}]++
		}
		if !slices.Contains(list, result.Verdict) {
			// Unlisted passes are only counted, which keeps memory flat however many objects pass (objects
			// read from files have no UID: a namespace's passes add up under ""). Unlisted results of other
			// verdicts are few (--results narrower than the default) and kept, for the reports' summaries.
			if result.Verdict == audit.Pass {
				ns := result.Resource.Namespace
				if t.passes[ns] == nil {
					t.passes[ns] = map[types.UID]int{}
				}
				t.passes[ns][result.Resource.UID]++
				continue
			}
		}
		t.listed = append(t.listed, result)
		t.listedKeys = append(t.listedKeys, key)
		k := keyOf(result.Resource)
		if prev, ok := t.sources[k]; !ok || lessSource(src, prev) {
			t.sources[k] = src
		}
	}
}
