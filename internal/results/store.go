package results

import (
	"math"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/uidmap"
)

// ObjectKey identifies one audited object in the version it was read in.
type ObjectKey struct {
	GVR schema.GroupVersionResource
	UID types.UID
}

// objResults is what the store keeps of one object read in one version: 24 bytes, kept for every audited
// object, so at cluster scale it is most of the operator's memory. The object's reference (API version, kind,
// namespace, uid) comes from where it is kept; its name is in its results, and compacted passes carry none.
//
// A policy whose results on the object are all passes is only counted: a pass carries a property map per
// binding and parameter, which would cost hundreds of bytes per object for nothing anybody reads. Up to
// four such counts fit inline; everything else (whole results, more or larger counts) goes to more.
type objResults struct {
	passes [inlinePasses]passCount
	more   *[]policyResults
}

const inlinePasses = 4

// passCount is the number of passes of one policy (an index into Store.policies). A count of 0 is a free slot.
type passCount struct{ policy, count uint16 }

// policyResults are one policy's results on one object: whole results, or only the number of its passes.
type policyResults struct {
	policy  uint32
	passes  int32
	results []audit.Result
}

// find returns policy pi's results on the object.
func (o *objResults) find(pi uint32) (policyResults, bool) {
	for _, p := range o.passes {
		if p.count > 0 && uint32(p.policy) == pi {
			return policyResults{policy: pi, passes: int32(p.count)}, true
		}
	}
	if o.more != nil {
		for _, p := range *o.more {
			if p.policy == pi {
				return p, true
			}
		}
	}
	return policyResults{}, false
}

// remove drops policy pi's results.
func (o *objResults) remove(pi uint32) {
	for i, p := range o.passes {
		if p.count > 0 && uint32(p.policy) == pi {
			o.passes[i] = passCount{}
			return
		}
	}
	if o.more == nil {
		return
	}
	more := *o.more
	for i, p := range more {
		if p.policy == pi {
			more = append(more[:i], more[i+1:]...)
			break
		}
	}
	if len(more) == 0 {
		o.more = nil
		return
	}
	*o.more = more
}

// add records p, whose policy has no results on the object yet.
func (o *objResults) add(p policyResults) {
	if p.results == nil && p.passes > 0 && p.passes <= math.MaxUint16 && p.policy <= math.MaxUint16 {
		for i := range o.passes {
			if o.passes[i].count == 0 {
				o.passes[i] = passCount{policy: uint16(p.policy), count: uint16(p.passes)}
				return
			}
		}
	}
	if o.more == nil {
		o.more = &[]policyResults{}
	}
	*o.more = append(*o.more, p)
}

func (o *objResults) empty() bool {
	if o.more != nil {
		return false
	}
	for _, p := range o.passes {
		if p.count > 0 {
			return false
		}
	}
	return true
}

// each calls f with every policy's results on the object.
func (o *objResults) each(f func(policyResults)) {
	for _, p := range o.passes {
		if p.count > 0 {
			f(policyResults{policy: uint32(p.policy), passes: int32(p.count)})
		}
	}
	if o.more != nil {
		for _, p := range *o.more {
			f(p)
		}
	}
}

// nsResults are the results on the objects of one namespace, by resource (an index given by Store.gvrIndex).
type nsResults map[uint32]*uidmap.Map[objResults]

// Store is the in-memory set of current results. It is safe for concurrent use.
type Store struct {
	mu         sync.RWMutex
	byNS       map[string]nsResults
	gvrIndex   map[schema.GroupVersionResource]uint32
	policies   []audit.PolicyKey // by index; compacted passes carry the key's name
	policyIdx  map[audit.PolicyKey]uint32
	intern     map[string]string
	keepPasses bool
	onChange   func(namespace string)
}

// Option configures a Store.
type Option func(*Store)

// KeepPasses keeps passing results whole, for reports that list passes. Without it, the passes of a policy
// whose results on an object are all passes are only counted: NamespaceCounted returns their number.
func KeepPasses(keep bool) Option { return func(s *Store) { s.keepPasses = keep } }

// NewStore returns an empty store that calls onChange (if not nil) with the namespace ("" for cluster-scoped
// objects) of every change. onChange runs under the store's lock and must not call back into the store.
func NewStore(onChange func(namespace string), opts ...Option) *Store {
	s := &Store{
		byNS:      map[string]nsResults{},
		gvrIndex:  map[schema.GroupVersionResource]uint32{},
		policyIdx: map[audit.PolicyKey]uint32{},
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
func (s *Store) Set(policy audit.PolicyKey, obj ObjectKey, namespace string, res []audit.Result) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	gi, ok := s.gvrIndex[obj.GVR]
	if !ok {
		if len(res) == 0 {
			return false
		}
		gi = s.addResourceLocked(obj.GVR)
	}
	objs := s.byNS[namespace][gi]
	var o objResults
	if objs != nil {
		o, _ = objs.Get(obj.UID)
	}
	var pi uint32
	if len(res) == 0 {
		if pi, ok = s.policyIdx[policy]; !ok {
			return false
		}
	} else {
		pi = s.policyLocked(policy)
	}
	cur, had := o.find(pi)
	next := s.compact(pi, res)
	switch {
	case len(res) == 0 && !had:
		return false
	case len(res) > 0 && had && cur.passes == next.passes && reflect.DeepEqual(cur.results, next.results):
		return false
	}
	if had {
		o.remove(pi)
	}
	if len(res) > 0 {
		o.add(next)
	}
	if o.empty() {
		s.removeLocked(namespace, gi, obj.UID)
	} else {
		if objs == nil {
			objs = s.objectsLocked(namespace, gi)
		}
		objs.Set(obj.UID, o)
	}
	s.changed(namespace)
	return true
}

// objectsLocked returns the objects of resource gi in namespace, creating the map.
func (s *Store) objectsLocked(namespace string, gi uint32) *uidmap.Map[objResults] {
	ns := s.byNS[namespace]
	if ns == nil {
		ns = nsResults{}
		s.byNS[s.internLocked(namespace)] = ns
	}
	objs := ns[gi]
	if objs == nil {
		objs = &uidmap.Map[objResults]{}
		ns[gi] = objs
	}
	return objs
}

func (s *Store) addResourceLocked(gvr schema.GroupVersionResource) uint32 {
	i := uint32(len(s.gvrIndex))
	s.gvrIndex[gvr] = i
	return i
}

// policyLocked returns the index of policy.
func (s *Store) policyLocked(policy audit.PolicyKey) uint32 {
	i, ok := s.policyIdx[policy]
	if !ok {
		i = uint32(len(s.policies))
		s.policies = append(s.policies, policy)
		s.policyIdx[policy] = i
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
	objs := s.byNS[namespace][gi]
	if objs == nil {
		return
	}
	if _, ok := objs.Get(obj.UID); ok {
		s.removeLocked(namespace, gi, obj.UID)
		s.changed(namespace)
	}
}

// DeletePolicy removes every result of a policy, or only those on objects of gvr when gvr is not empty.
func (s *Store) DeletePolicy(policy audit.PolicyKey, gvr schema.GroupVersionResource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ok := s.policyIdx[policy]
	if !ok {
		return
	}
	only, known := s.gvrIndex[gvr]
	if !gvr.Empty() && !known {
		return
	}
	for namespace, ns := range s.byNS {
		touched := false
		for gi, objs := range ns {
			if !gvr.Empty() && gi != only {
				continue
			}
			objs.Update(func(o objResults) (objResults, bool) {
				if _, had := o.find(pi); had {
					o.remove(pi)
					touched = true
				}
				return o, !o.empty()
			})
			if objs.Len() == 0 {
				delete(ns, gi)
			}
		}
		if len(ns) == 0 {
			delete(s.byNS, namespace)
		}
		if touched {
			s.changed(namespace)
		}
	}
}

// NamespaceCounted returns the results on objects in namespace that are kept whole, in no particular
// order, and the number of compacted passes of each object, which carry nothing but their number.
func (s *Store) NamespaceCounted(namespace string) (results []audit.Result, passes map[types.UID]int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	passes = map[types.UID]int{}
	for _, objs := range s.byNS[namespace] {
		for uid, o := range objs.All() {
			n := 0
			o.each(func(p policyResults) {
				results = append(results, p.results...)
				n += int(p.passes)
			})
			if n > 0 {
				// An object read in several versions of its resource is kept once per version.
				passes[uid] += n
			}
		}
	}
	return results, passes
}

// Len returns the number of objects that have results, counting an object once per version it is read in.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, ns := range s.byNS {
		for _, objs := range ns {
			n += objs.Len()
		}
	}
	return n
}

func (s *Store) removeLocked(namespace string, gi uint32, uid types.UID) {
	ns := s.byNS[namespace]
	objs := ns[gi]
	if objs == nil {
		return
	}
	objs.Delete(uid)
	if objs.Len() == 0 {
		delete(ns, gi)
	}
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
		for _, objs := range ns {
			for o := range objs.Values() {
				o.each(func(p policyResults) {
					out[audit.Pass] += int(p.passes)
					for _, r := range p.results {
						out[r.Verdict]++
					}
				})
			}
		}
	}
	return out
}
