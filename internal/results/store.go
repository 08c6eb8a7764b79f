package results

import (
	"math/bits"
	"reflect"
	"slices"
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

// objResults is what the store keeps of one object read in one version: 16 bytes, kept for every audited
// object, so at cluster scale it is most of the operator's memory. The object's reference (API version, kind,
// namespace, uid) comes from where it is kept; its name is in its results, and compacted passes carry none.
//
// A policy whose results on the object are all passes is only counted: a pass carries a property map per
// binding and parameter, which would cost hundreds of bytes per object for nothing anybody reads. The count
// takes passBits bits of passes, at the policy's number on the object's resource (resourcePolicies): an
// object that passes 10 policies costs no more than one that passes a single one, where a list of counts
// would grow with every policy. Everything else (whole results, larger counts, policies numbered past the
// bits) goes to more, which is nil for most objects.
type objResults struct {
	passes uint64
	more   *[]policyResults
}

const (
	passBits = 2
	// inlinePolicies is the number of policies of a resource whose counts fit in objResults.passes.
	inlinePolicies = 64 / passBits
	// maxInlineCount is the largest count that fits: one pass per binding of a policy bound up to three times.
	maxInlineCount = 1<<passBits - 1
	passMask       = uint64(maxInlineCount)
)

// policyResults are one policy's results on one object: whole results, or only the number of its passes.
// Inside objResults, policy is the policy's number on the object's resource, not its index in Store.policies.
type policyResults struct {
	policy  uint32
	passes  int32
	results []audit.Result
}

// find returns the results of the policy numbered li on the object's resource.
func (o *objResults) find(li uint32) (policyResults, bool) {
	if li < inlinePolicies {
		if c := o.passes >> (li * passBits) & passMask; c != 0 {
			return policyResults{policy: li, passes: int32(c)}, true
		}
	}
	if o.more != nil {
		for _, p := range *o.more {
			if p.policy == li {
				return p, true
			}
		}
	}
	return policyResults{}, false
}

// remove drops the results of the policy numbered li.
func (o *objResults) remove(li uint32) {
	if li < inlinePolicies {
		if slot := passMask << (li * passBits); o.passes&slot != 0 {
			o.passes &^= slot
			return
		}
	}
	if o.more == nil {
		return
	}
	more := *o.more
	for i, p := range more {
		if p.policy == li {
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
	if p.results == nil && p.passes > 0 && p.passes <= maxInlineCount && p.policy < inlinePolicies {
		o.passes |= uint64(p.passes) << (p.policy * passBits)
		return
	}
	if o.more == nil {
		o.more = &[]policyResults{}
	}
	*o.more = append(*o.more, p)
}

func (o *objResults) empty() bool { return o.passes == 0 && o.more == nil }

// each calls f with every policy's results on the object, policies by their number on the object's resource.
func (o *objResults) each(f func(policyResults)) {
	for rest := o.passes; rest != 0; {
		li := uint32(bits.TrailingZeros64(rest)) / passBits
		shift := li * passBits
		f(policyResults{policy: li, passes: int32(rest >> shift & passMask)})
		rest &^= passMask << shift
	}
	if o.more != nil {
		for _, p := range *o.more {
			f(p)
		}
	}
}

// resourcePolicies numbers the policies that have results on one resource, so that an object's record is
// indexed by these small numbers, not by the store's policy indexes, and stays inline however many policies
// the whole cluster has. The number of a policy whose results on the resource are deleted is given to the
// next new one, so that policies coming and going do not push their successors out of the inline bits.
type resourcePolicies struct {
	global []uint32          // by number: index into Store.policies
	local  map[uint32]uint32 // by index into Store.policies: number
	free   []uint32          // numbers no object holds results under
}

// nsResults are the results on the objects of one namespace, by resource (an index given by Store.gvrIndex).
type nsResults map[uint32]*uidmap.Map[objResults]

// Store is the in-memory set of current results. It is safe for concurrent use.
type Store struct {
	mu         sync.RWMutex
	byNS       map[string]nsResults
	gvrIndex   map[schema.GroupVersionResource]uint32
	resources  []resourcePolicies // by resource index
	policies   []audit.PolicyKey  // by index; compacted passes carry the key's name
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
	var li uint32
	if len(res) == 0 {
		pi, known := s.policyIdx[policy]
		if !known {
			return false
		}
		if li, known = s.resources[gi].local[pi]; !known {
			return false
		}
	} else {
		li = s.resources[gi].number(s.policyLocked(policy))
	}
	cur, had := o.find(li)
	next := s.compact(li, res)
	switch {
	case len(res) == 0 && !had:
		return false
	case len(res) > 0 && had && cur.passes == next.passes && reflect.DeepEqual(cur.results, next.results):
		return false
	}
	if had {
		o.remove(li)
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
	s.resources = append(s.resources, resourcePolicies{local: map[uint32]uint32{}})
	return i
}

// number returns the number of policy pi on the resource, numbering it if it has none yet: the lowest free
// number, for the best chance to fit inline.
func (r *resourcePolicies) number(pi uint32) uint32 {
	if li, ok := r.local[pi]; ok {
		return li
	}
	var li uint32
	if len(r.free) > 0 {
		i := slices.Index(r.free, slices.Min(r.free))
		li = r.free[i]
		r.free = slices.Delete(r.free, i, i+1)
		r.global[li] = pi
	} else {
		li = uint32(len(r.global))
		r.global = append(r.global, pi)
	}
	r.local[pi] = li
	return li
}

// release frees the number of policy pi, once no object of the resource holds results under it.
func (r *resourcePolicies) release(pi uint32) {
	if li, ok := r.local[pi]; ok {
		delete(r.local, pi)
		r.free = append(r.free, li)
	}
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

// compact returns res as the store keeps them for the policy numbered li on the object's resource.
func (s *Store) compact(li uint32, res []audit.Result) policyResults {
	if s.keepPasses || len(res) == 0 {
		return policyResults{policy: li, results: res}
	}
	for _, r := range res {
		if r.Verdict != audit.Pass {
			return policyResults{policy: li, results: res}
		}
	}
	return policyResults{policy: li, passes: int32(len(res))}
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
			li, numbered := s.resources[gi].local[pi]
			if !numbered {
				continue // no object of the resource holds a result of the policy
			}
			objs.Update(func(o objResults) (objResults, bool) {
				if _, had := o.find(li); had {
					o.remove(li)
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
	if gvr.Empty() {
		for gi := range s.resources {
			s.resources[gi].release(pi)
		}
	} else {
		s.resources[only].release(pi)
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

// Namespaces returns the namespaces ("" for cluster-scoped objects) that have results, passes included: those
// whose reports list or count something.
func (s *Store) Namespaces() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.byNS))
	for ns := range s.byNS {
		out = append(out, ns)
	}
	return out
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
