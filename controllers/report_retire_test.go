package controllers

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
)

// woken reports whether r asked for a Reconcile since it was last asked, and takes the request.
func woken(r *retiredReports) bool {
	select {
	case <-r.signal:
		return true
	default:
		return false
	}
}

// The removal of retired reports waits for the namespaces not yet current, whenever they became current, and
// is woken once, when the last of them does; once the reports are removed, nothing is kept or woken.
func TestRetiredReportsWaitForEveryNamespace(t *testing.T) {
	r := newRetiredReports(wgpolicyAPI{})
	if !woken(r) {
		t.Fatal("a new remover has no Reconcile pending: one that starts after the first audit would wait forever")
	}
	r.reportsCurrent("a") // before the removal looked: remembered
	waiting := r.waitFor(sets.New("a", "b", "c", ""))
	slices.Sort(waiting)
	if want := []string{"", "b", "c"}; !slices.Equal(waiting, want) {
		t.Fatalf("waiting for %q, want %q", waiting, want)
	}
	for _, ns := range []string{"b", "x", ""} {
		r.reportsCurrent(ns)
		if woken(r) {
			t.Fatalf("woken when %q became current, with c still waiting", ns)
		}
	}
	r.reportsCurrent("c")
	if !woken(r) {
		t.Fatal("not woken when the last namespace waited for became current")
	}
	if waiting := r.waitFor(sets.New("a", "b", "c", "x")); len(waiting) != 0 {
		t.Fatalf("waiting for %q, all current", waiting)
	}

	r.finish()
	r.reportsCurrent("d")
	if woken(r) || r.current != nil || !r.finished() {
		t.Fatalf("after the removal: woken or keeping %v", r.current)
	}
}
