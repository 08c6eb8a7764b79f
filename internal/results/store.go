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

// objKey is ObjectKey with the resource as an index into Store.gvrs: a map key of 24 bytes instead of 64.
type objKey struct {
	gvr uint32
	uid types.UID
}

// entry is what the store keeps of one object: its name and, per policy, its results. It is small on
// purpose: at cluster scale it is most of the operator's memory. The rest of the object's reference (API
// version, kind, namespace, uid) comes from its key and the resource's table entry.
type entry struct {
	name     string
	policies []policyResults // sorted by policy index
}

// policyResults are one policy's results on one object. When every result is a pass and passes are not
// listed in reports, only their number is kept: a pass carries a property map per binding and parameter,
// which would cost hundreds of bytes per object for nothing anybody reads.
type policyResults struct {
	policy  uint32 // index into Store.policies
	passes  int32
	results []audit.Result
}

type resourceInfo struct {
	gvr        schema.GroupVersionResource
	apiVersion string
	kind       string
}

type policyInfo struct {
	key  string
	name string // the policy name its results carry, for compacted passes
}

// Store is the in-memory set of current results. It is safe for concurrent use.
type Store struct {
	mu         sync.RWMutex
	byNS       map[string]map[objKey]*entry
	gvrs       []resourceInfo
	gvrIndex   map[schema.GroupVersionResource]uint32
	policies   []policyInfo
	policyIdx  map[string]uint32
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
		byNS:      map[string]map[objKey]*entry{},
		gvrIndex:  map[schema.GroupVersionResource]uint32{},
		policyIdx: map[string]uint32{},
		intern:    map[string]string{},
		onChange:  onChange,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Set replaces the results of one policy for one object. An empty list removes them. It reports whether
// anything changed.
func (s *Store) Set(policy string, obj ObjectKey, namespace string, res []audit.Result) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	gi, ok := s.gvrIndex[obj.GVR]
	if !ok {
		if len(res) == 0 {
			return false
		}
		gi = s.addResourceLocked(obj.GVR, res[0].Resource)
	}
	k := objKey{gvr: gi, uid: obj.UID}
	ns := s.byNS[namespace]
	e := ns[k]
	if e == nil {
		if len(res) == 0 {
			return false
		}
		if ns == nil {
			ns = map[objKey]*entry{}
			s.byNS[s.internLocked(namespace)] = ns
		}
		e = &entry{name: res[0].Resource.Name}
		ns[k] = e
	}
	pi := s.policyLocked(policy, res)
	next := s.compact(pi, res)
	i := sort.Search(len(e.policies), func(i int) bool { return e.policies[i].policy >= pi })
	had := i < len(e.policies) && e.policies[i].policy == pi
	switch {
	case len(res) == 0:
		if !had {
			return false
		}
		e.policies = append(e.policies[:i], e.policies[i+1:]...)
		if len(e.policies) == 0 {
			s.removeLocked(namespace, k)
		}
	case had:
		old := e.policies[i]
		if old.passes == next.passes && reflect.DeepEqual(old.results, next.results) {
			return false
		}
		e.policies[i] = next
	default:
		e.policies = append(e.policies, policyResults{})
		copy(e.policies[i+1:], e.policies[i:])
		e.policies[i] = next
	}
	s.changed(namespace)
	return true
}

func (s *Store) addResourceLocked(gvr schema.GroupVersionResource, ref audit.ObjectRef) uint32 {
	i := uint32(len(s.gvrs))
	s.gvrs = append(s.gvrs, resourceInfo{gvr: gvr, apiVersion: ref.APIVersion, kind: ref.Kind})
	s.gvrIndex[gvr] = i
	return i
}

// policyLocked returns the index of policy, recording the name its results carry.
func (s *Store) policyLocked(policy string, res []audit.Result) uint32 {
	i, ok := s.policyIdx[policy]
	if !ok {
		i = uint32(len(s.policies))
		s.policies = append(s.policies, policyInfo{key: policy})
		s.policyIdx[policy] = i
	}
	if len(res) > 0 && s.policies[i].name == "" {
		s.policies[i].name = res[0].Policy
	}
	return i
}

func (s *Store) compact(policy uint32, res []audit.Result) policyResults {
	if s.keepPasses || len(res) == 0 {
		return policyResults{policy: policy, results: res}
	}
	for _, r := range res {
		if r.Verdict != audit.Pass {
			return policyResults{policy: policy, results: res}
		}
	}
	return policyResults{policy: policy, passes: int32(len(res))}
}

// DeleteObject removes every result of an object in namespace.
func (s *Store) DeleteObject(obj ObjectKey, namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gi, ok := s.gvrIndex[obj.GVR]
	if !ok {
		return
	}
	k := objKey{gvr: gi, uid: obj.UID}
	if _, ok := s.byNS[namespace][k]; ok {
		s.removeLocked(namespace, k)
		s.changed(namespace)
	}
}

// DeletePolicy removes every result of a policy, or only those on objects of gvr when gvr is not empty.
func (s *Store) DeletePolicy(policy string, gvr schema.GroupVersionResource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ok := s.policyIdx[policy]
	if !ok {
		return
	}
	gi, known := s.gvrIndex[gvr]
	if !gvr.Empty() && !known {
		return
	}
	for namespace, ns := range s.byNS {
		touched := false
		for k, e := range ns {
			if !gvr.Empty() && k.gvr != gi {
				continue
			}
			i := sort.Search(len(e.policies), func(i int) bool { return e.policies[i].policy >= pi })
			if i == len(e.policies) || e.policies[i].policy != pi {
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
	for k, e := range s.byNS[namespace] {
		for _, p := range e.policies {
			if p.results != nil {
				out = append(out, p.results...)
				continue
			}
			ri := s.gvrs[k.gvr]
			ref := audit.ObjectRef{APIVersion: ri.apiVersion, Kind: ri.kind, Namespace: namespace, Name: e.name, UID: k.uid}
			for i := range p.passes {
				r := audit.Result{Policy: s.policies[p.policy].name, Verdict: audit.Pass, Resource: ref}
				if i > 0 {
					r.Rule = "pass-" + strconv.Itoa(int(i)+1)
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// NamespaceCounted returns the results on objects in namespace that are kept whole, in no particular
// order, and the number of compacted passes of each object, which carry nothing but their number.
func (s *Store) NamespaceCounted(namespace string) (results []audit.Result, passes map[types.UID]int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	passes = map[types.UID]int{}
	for k, e := range s.byNS[namespace] {
		n := 0
		for _, p := range e.policies {
			results = append(results, p.results...)
			n += int(p.passes)
		}
		if n > 0 {
			// An object read in several versions of its resource has an entry per version.
			passes[k.uid] += n
		}
	}
	return results, passes
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

func (s *Store) removeLocked(namespace string, k objKey) {
	ns := s.byNS[namespace]
	delete(ns, k)
	if len(ns) == 0 {
		delete(s.byNS, namespace)
	}
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
