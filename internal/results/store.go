package results

import (
	"reflect"
	"sort"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
)

// ObjectKey identifies one audited object in the version it was read in.
type ObjectKey struct {
	GVR schema.GroupVersionResource
	UID types.UID
}

// entry is what the store keeps of one object: its reference and, per policy, its results. It is small on
// purpose: at cluster scale it is most of the operator's memory.
type entry struct {
	ref      audit.ObjectRef
	policies []policyResults // sorted by key
}

// policyResults are one policy's results on one object. When every result is a pass and passes are not
// listed in reports, only their number and the policy name are kept: a pass carries a property map per
// binding and parameter, which would cost hundreds of bytes per object for nothing anybody reads.
type policyResults struct {
	key     string
	name    string
	passes  int32
	results []audit.Result
}

// Store is the in-memory set of current results. It is safe for concurrent use.
type Store struct {
	mu         sync.RWMutex
	byNS       map[string]map[ObjectKey]*entry
	intern     map[string]string
	keepPasses bool
	onChange   func(namespace string)
}

// Option configures a Store.
type Option func(*Store)

// KeepPasses keeps passing results whole, for reports that list passes. Without it, Namespace returns
// equivalent passes that carry the policy and the object but no rule, message or properties.
func KeepPasses(keep bool) Option { return func(s *Store) { s.keepPasses = keep } }

// NewStore returns an empty store that calls onChange (if not nil) with the namespace ("" for cluster-scoped
// objects) of every change. onChange runs under the store's lock and must not call back into the store.
func NewStore(onChange func(namespace string), opts ...Option) *Store {
	s := &Store{
		byNS:     map[string]map[ObjectKey]*entry{},
		intern:   map[string]string{},
		onChange: onChange,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Set replaces the results of one policy for one object. An empty list removes them. It reports whether
// anything changed.
func (s *Store) Set(policy string, obj ObjectKey, namespace string, res []audit.Result) bool {
	next := s.compact(policy, res)
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.byNS[namespace]
	e := ns[obj]
	if e == nil {
		if len(res) == 0 {
			return false
		}
		if ns == nil {
			ns = map[ObjectKey]*entry{}
			s.byNS[s.internLocked(namespace)] = ns
		}
		e = &entry{ref: s.refLocked(res[0].Resource)}
		ns[obj] = e
	}
	i := sort.Search(len(e.policies), func(i int) bool { return e.policies[i].key >= policy })
	had := i < len(e.policies) && e.policies[i].key == policy
	switch {
	case len(res) == 0:
		if !had {
			return false
		}
		e.policies = append(e.policies[:i], e.policies[i+1:]...)
		if len(e.policies) == 0 {
			s.removeLocked(namespace, obj)
		}
	case had:
		old := e.policies[i]
		if old.passes == next.passes && old.name == next.name && reflect.DeepEqual(old.results, next.results) {
			return false
		}
		next.key = old.key
		e.policies[i] = next
	default:
		next.key = s.internLocked(policy)
		e.policies = append(e.policies, policyResults{})
		copy(e.policies[i+1:], e.policies[i:])
		e.policies[i] = next
	}
	s.changed(namespace)
	return true
}

func (s *Store) compact(policy string, res []audit.Result) policyResults {
	if s.keepPasses || len(res) == 0 {
		return policyResults{key: policy, results: res}
	}
	for _, r := range res {
		if r.Verdict != audit.Pass {
			return policyResults{key: policy, results: res}
		}
	}
	return policyResults{key: policy, name: res[0].Policy, passes: int32(len(res))}
}

// DeleteObject removes every result of an object in namespace.
func (s *Store) DeleteObject(obj ObjectKey, namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byNS[namespace][obj]; ok {
		s.removeLocked(namespace, obj)
		s.changed(namespace)
	}
}

// DeletePolicy removes every result of a policy, or only those on objects of gvr when gvr is not empty.
func (s *Store) DeletePolicy(policy string, gvr schema.GroupVersionResource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for namespace, ns := range s.byNS {
		touched := false
		for k, e := range ns {
			if !gvr.Empty() && k.GVR != gvr {
				continue
			}
			i := sort.Search(len(e.policies), func(i int) bool { return e.policies[i].key >= policy })
			if i == len(e.policies) || e.policies[i].key != policy {
				continue
			}
			e.policies = append(e.policies[:i], e.policies[i+1:]...)
			if len(e.policies) == 0 {
				s.removeLocked(namespace, k)
			}
			touched = true
		}
		if touched {
			s.changed(namespace)
		}
	}
}

// Namespace returns every result on objects in namespace ("" for cluster-scoped objects), in no particular
// order. Compacted passes come back as passes with the policy and the object, and a rule that tells them
// apart ("pass-2", ...) when a policy passed several times (once per binding and param).
func (s *Store) Namespace(namespace string) []audit.Result {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []audit.Result
	for _, e := range s.byNS[namespace] {
		for _, p := range e.policies {
			if p.results != nil {
				out = append(out, p.results...)
				continue
			}
			for i := range p.passes {
				r := audit.Result{Policy: p.name, Verdict: audit.Pass, Resource: e.ref}
				if i > 0 {
					r.Rule = "pass-" + strconv.Itoa(int(i)+1)
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// Namespaces returns the sorted namespaces that hold results.
func (s *Store) Namespaces() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.byNS))
	for ns := range s.byNS {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// Len returns the number of objects that have results.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, ns := range s.byNS {
		n += len(ns)
	}
	return n
}

func (s *Store) removeLocked(namespace string, k ObjectKey) {
	ns := s.byNS[namespace]
	delete(ns, k)
	if len(ns) == 0 {
		delete(s.byNS, namespace)
	}
}

// refLocked returns ref with its repeated strings (API version, kind, namespace) shared with other objects.
func (s *Store) refLocked(ref audit.ObjectRef) audit.ObjectRef {
	ref.APIVersion = s.internLocked(ref.APIVersion)
	ref.Kind = s.internLocked(ref.Kind)
	ref.Namespace = s.internLocked(ref.Namespace)
	return ref
}

func (s *Store) internLocked(v string) string {
	if x, ok := s.intern[v]; ok {
		return x
	}
	s.intern[v] = v
	return v
}

func (s *Store) changed(namespace string) {
	if s.onChange != nil {
		s.onChange(namespace)
	}
}

// Counts returns the number of results per verdict, compacted passes included.
func (s *Store) Counts() map[audit.Verdict]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[audit.Verdict]int{}
	for _, ns := range s.byNS {
		for _, e := range ns {
			for _, p := range e.policies {
				out[audit.Pass] += int(p.passes)
				for _, r := range p.results {
					out[r.Verdict]++
				}
			}
		}
	}
	return out
}
