package report

import (
	"strconv"

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
