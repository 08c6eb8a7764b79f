package report

import (
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

func managedLabels() map[string]string {
	return map[string]string{ManagedByLabel: ManagedByValue}
}

// chunkIndex returns i for a report named ChunkName(i).
func chunkIndex(name string) (int, bool) {
	if name == NamePrefix {
		return 0, true
	}
	rest, ok := strings.CutPrefix(name, NamePrefix+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i <= 0 || ChunkName(i) != name {
		return 0, false
	}
	return i, true
}

// ChunkCounts returns, for each namespace ("" for the cluster) with managed reports in existing, the number
// of chunks they are split into: the smallest power of two above every chunk index. It is what
// Options.Chunks expects.
func ChunkCounts(existing Reports) map[string]int {
	out := map[string]int{}
	note := func(ns string, meta *metav1.ObjectMeta) {
		i, ok := chunkIndex(meta.Name)
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
