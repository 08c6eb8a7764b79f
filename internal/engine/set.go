package engine

import (
	"cmp"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
)

// Set holds compiled policies indexed by the resources they cover: the one answer every front end gets to
// "which policies judge the objects of this resource" (a check of files, the what-if run, the scanner).
//
// A Set is immutable and safe for concurrent use. A front end whose policies change (the scanner) builds
// the next Set with With or Without, outside its locks, and swaps it in: readers never wait for a change.
type Set struct {
	byGVR map[schema.GroupVersionResource][]audit.Policy // each sorted by key; never modified once built
}

// NewSet returns the set of policies. Policies of equal keys are all kept, in the order given.
func NewSet(policies ...audit.Policy) *Set {
	s := &Set{byGVR: map[schema.GroupVersionResource][]audit.Policy{}}
	for _, p := range policies {
		for _, gvr := range p.Resources() {
			s.byGVR[gvr] = append(s.byGVR[gvr], p)
		}
	}
	for _, ps := range s.byGVR {
		slices.SortStableFunc(ps, audit.ComparePolicies)
	}
	return s
}

// For returns the policies covering gvr, sorted by key. The slice is shared: do not modify it.
func (s *Set) For(gvr schema.GroupVersionResource) []audit.Policy { return s.byGVR[gvr] }

// Covers reports whether a policy of the set registered under key covers gvr.
func (s *Set) Covers(key audit.PolicyKey, gvr schema.GroupVersionResource) bool {
	return slices.ContainsFunc(s.byGVR[gvr], func(p audit.Policy) bool { return p.Key() == key })
}

// Resources returns every resource some policy of the set covers, sorted by their string form.
func (s *Set) Resources() []schema.GroupVersionResource {
	return slices.SortedFunc(maps.Keys(s.byGVR), func(a, b schema.GroupVersionResource) int {
		return cmp.Compare(a.String(), b.String())
	})
}

// With returns the set with p in place of the policies of its key. s is left as it is.
func (s *Set) With(p audit.Policy) *Set {
	next := s.Without(p.Key())
	for _, gvr := range p.Resources() {
		ps := append(slices.Clip(next.byGVR[gvr]), p) // a copy: the slice may be shared with s
		slices.SortStableFunc(ps, audit.ComparePolicies)
		next.byGVR[gvr] = ps
	}
	return next
}

// Without returns the set without the policies of key. s is left as it is.
func (s *Set) Without(key audit.PolicyKey) *Set {
	next := &Set{byGVR: make(map[schema.GroupVersionResource][]audit.Policy, len(s.byGVR))}
	for gvr, ps := range s.byGVR {
		if !slices.ContainsFunc(ps, func(p audit.Policy) bool { return p.Key() == key }) {
			next.byGVR[gvr] = ps // shared: never modified
			continue
		}
		kept := slices.DeleteFunc(slices.Clone(ps), func(p audit.Policy) bool { return p.Key() == key })
		if len(kept) > 0 {
			next.byGVR[gvr] = kept
		}
	}
	return next
}
