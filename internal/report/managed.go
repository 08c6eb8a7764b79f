package report

import (
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// The label that marks the reports celaudit owns. Diff only ever updates or deletes reports carrying it,
// so reports written by other tools (Kyverno, Kubewarden, ...) in the same namespaces are left alone.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "celaudit"
)

// NamePrefix is the name of the first report of a namespace (or of the cluster); further chunks are named
// NamePrefix-1, NamePrefix-2, ...
const NamePrefix = "celaudit"

// IsManaged reports whether obj is a report celaudit owns.
func IsManaged(obj metav1.Object) bool {
	return obj.GetLabels()[ManagedByLabel] == ManagedByValue
}

// ChunkName returns the name of the report chunk with the given index.
func ChunkName(index int) string {
	if index == 0 {
		return NamePrefix
	}
	return NamePrefix + "-" + strconv.Itoa(index)
}

// chunkName returns the name of chunk index, or, for alt > 0, its alt-th alternative: ChunkName(index)
// followed by "." and alt. The names of chunks never hold a '.', so no alternative is another chunk's name.
func chunkName(index, alt int) string {
	if alt == 0 {
		return ChunkName(index)
	}
	return ChunkName(index) + "." + strconv.Itoa(alt)
}

// FreeChunkName returns the name of chunk index given the names taken in its namespace: the first of
// ChunkName(index), ChunkName(index)+".1", ChunkName(index)+".2", ... that is not taken.
func FreeChunkName(index int, taken sets.Set[string]) string {
	for alt := 0; ; alt++ {
		if name := chunkName(index, alt); !taken.Has(name) {
			return name
		}
	}
}

func managedLabels() map[string]string {
	return map[string]string{ManagedByLabel: ManagedByValue}
}

// ChunkIndex returns the index of the chunk a report named name holds: i for a name chunkName(i, alt).
func ChunkIndex(name string) (int, bool) {
	i, _, ok := parseChunkName(name)
	return i, ok
}

// parseChunkName is the inverse of chunkName.
func parseChunkName(name string) (index, alt int, ok bool) {
	base, suffix, dotted := strings.Cut(name, ".")
	if dotted {
		a, err := strconv.Atoi(suffix)
		if err != nil || a <= 0 {
			return 0, 0, false
		}
		alt = a
	}
	if base != NamePrefix {
		rest, ok := strings.CutPrefix(base, NamePrefix+"-")
		if !ok {
			return 0, 0, false
		}
		i, err := strconv.Atoi(rest)
		if err != nil || i <= 0 {
			return 0, 0, false
		}
		index = i
	}
	if chunkName(index, alt) != name { // no sign, no leading zeros
		return 0, 0, false
	}
	return index, alt, true
}

// ChunkCounts returns, for each namespace ("" for the cluster) with managed reports in existing, the number
// of chunks they are split into: the smallest power of two above every chunk index. It is what
// Options.Chunks expects.
func ChunkCounts(existing Reports) map[string]int {
	out := map[string]int{}
	note := func(ns string, meta *metav1.ObjectMeta) {
		i, ok := ChunkIndex(meta.Name)
		if !ok || !IsManaged(meta) {
			return
		}
		k := 1
		for k <= i {
			k *= 2
		}
		out[ns] = max(out[ns], k)
	}
	for i := range existing.PolicyReports {
		note(existing.PolicyReports[i].Namespace, &existing.PolicyReports[i].ObjectMeta)
	}
	for i := range existing.ClusterPolicyReports {
		note("", &existing.ClusterPolicyReports[i].ObjectMeta)
	}
	return out
}

// TakenNames returns, by namespace ("" for the cluster), the names that chunks must not take (see
// Options.Taken): those in foreign and those of the reports in existing that celaudit does not own (the
// names held by others' reports), and, for each chunk that celaudit's reports in existing publish under an
// alternative name, the names before that one. A chunk moves
// to an alternative only once the names before it were found taken; reading that back from the reports keeps
// a chunk's name across a restart, which forgets foreign, instead of trying the taken name again and deleting
// the report under the alternative meanwhile.
func TakenNames(existing Reports, foreign map[string]sets.Set[string]) map[string]sets.Set[string] {
	out := make(map[string]sets.Set[string], len(foreign))
	add := func(ns string, names ...string) {
		if out[ns] == nil {
			out[ns] = sets.New[string]()
		}
		out[ns].Insert(names...)
	}
	for ns, names := range foreign {
		add(ns, names.UnsortedList()...)
	}
	note := func(ns string, meta *metav1.ObjectMeta) {
		if !IsManaged(meta) {
			add(ns, meta.Name)
			return
		}
		i, alt, ok := parseChunkName(meta.Name)
		if !ok {
			return
		}
		for a := range alt {
			add(ns, chunkName(i, a))
		}
	}
	for i := range existing.PolicyReports {
		note(existing.PolicyReports[i].Namespace, &existing.PolicyReports[i].ObjectMeta)
	}
	for i := range existing.ClusterPolicyReports {
		note("", &existing.ClusterPolicyReports[i].ObjectMeta)
	}
	return out
}
