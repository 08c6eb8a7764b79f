package results

import (
	"reflect"
	"sort"
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

type entry struct {
	namespace string
	byPolicy  map[string][]audit.Result
}

// Store is the in-memory set of current results. It is safe for concurrent use.
type Store struct {
	mu       sync.RWMutex
	objects  map[ObjectKey]*entry
	byNS     map[string]map[ObjectKey]*entry
	onChange func(namespace string)
}

// NewStore returns an empty store that calls onChange (if not nil) with the namespace ("" for cluster-scoped
// objects) of every change. onChange runs under the store's lock and must not call back into the store.
func NewStore(onChange func(namespace string)) *Store {
	return &Store{
		objects:  map[ObjectKey]*entry{},
		byNS:     map[string]map[ObjectKey]*entry{},
		onChange: onChange,
	}
}

// Set replaces the results of one policy for one object. An empty list removes them. It reports whether
// anything changed.
func (s *Store) Set(policy string, obj ObjectKey, namespace string, res []audit.Result) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.objects[obj]
	if e == nil {
		if len(res) == 0 {
			return false
		}
		e = &entry{namespace: namespace, byPolicy: map[string][]audit.Result{}}
		s.objects[obj] = e
		ns := s.byNS[namespace]
		if ns == nil {
			ns = map[ObjectKey]*entry{}
			s.byNS[namespace] = ns
		}
		ns[obj] = e
	}
	old, had := e.byPolicy[policy]
	if len(res) == 0 {
		if !had {
			return false
		}
		delete(e.byPolicy, policy)
		if len(e.byPolicy) == 0 {
			s.removeLocked(obj, e)
		}
		s.changed(namespace)
		return true
	}
	if had && reflect.DeepEqual(old, res) {
		return false
	}
	e.byPolicy[policy] = res
	s.changed(namespace)
	return true
}

// DeleteObject removes every result of an object.
func (s *Store) DeleteObject(obj ObjectKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.objects[obj]; e != nil {
		s.removeLocked(obj, e)
		s.changed(e.namespace)
	}
}

// DeletePolicy removes every result of a policy, or only those on objects of gvr when gvr is not empty.
func (s *Store) DeletePolicy(policy string, gvr schema.GroupVersionResource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	touched := map[string]bool{}
	for k, e := range s.objects {
		if !gvr.Empty() && k.GVR != gvr {
			continue
		}
		if _, ok := e.byPolicy[policy]; !ok {
			continue
		}
		delete(e.byPolicy, policy)
		if len(e.byPolicy) == 0 {
			s.removeLocked(k, e)
		}
		touched[e.namespace] = true
	}
	for ns := range touched {
		s.changed(ns)
	}
}

// Namespace returns a copy of every result on objects in namespace ("" for cluster-scoped objects), in no
// particular order.
func (s *Store) Namespace(namespace string) []audit.Result {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []audit.Result
	for _, e := range s.byNS[namespace] {
		for _, rs := range e.byPolicy {
			out = append(out, rs...)
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
	return len(s.objects)
}

func (s *Store) removeLocked(k ObjectKey, e *entry) {
	delete(s.objects, k)
	if ns := s.byNS[e.namespace]; ns != nil {
		delete(ns, k)
		if len(ns) == 0 {
			delete(s.byNS, e.namespace)
		}
	}
}

func (s *Store) changed(namespace string) {
	if s.onChange != nil {
		s.onChange(namespace)
	}
}
