package shard

import (
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The annotations every report written in sharded mode carries: the epoch of the layout it was written
// under, which orders writers (a report is never overwritten from a lower epoch), and the writer's place,
// "index/count", for the humans reading it.
const (
	EpochAnnotation  = "celaudit.io/shard-epoch"
	MemberAnnotation = "celaudit.io/shard"
)

// Member returns the layout of the member with ordinal ordinal among replicas members, at epoch: the
// ordinal-th range of replicas, or, for an ordinal outside them (a pod being scaled away), a layout that owns
// nothing.
func Member(ordinal, replicas int, epoch int64) Layout {
	if ordinal >= replicas {
		return Layout{Index: ordinal, Count: replicas, Epoch: epoch, None: true}
	}
	return Layout{Index: ordinal, Count: replicas, Epoch: epoch}
}

// Ordinal returns the ordinal of the pod named pod in the StatefulSet named set: the N of "set-N", as the
// StatefulSet controller names its pods.
func Ordinal(set, pod string) (int, error) {
	suffix, ok := strings.CutPrefix(pod, set+"-")
	if !ok {
		return 0, fmt.Errorf("pod name %q is not the name of a pod of StatefulSet %q (%s-<ordinal>)", pod, set, set)
	}
	n, err := strconv.Atoi(suffix)
	if err != nil || n < 0 || strconv.Itoa(n) != suffix {
		return 0, fmt.Errorf("pod name %q does not end in the ordinal of a pod of StatefulSet %q (%s-<ordinal>)", pod, set, set)
	}
	return n, nil
}

// Annotations returns the annotations of a report written under l.
func (l Layout) Annotations() map[string]string {
	return map[string]string{
		EpochAnnotation:  strconv.FormatInt(l.Epoch, 10),
		MemberAnnotation: fmt.Sprintf("%d/%d", l.Index, l.Count),
	}
}

// EpochOf returns the epoch a report was written under, and false when it carries none (written unsharded,
// or the annotation edited into something else).
func EpochOf(obj metav1.Object) (int64, bool) {
	v, ok := obj.GetAnnotations()[EpochAnnotation]
	if !ok {
		return 0, false
	}
	e, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false
	}
	return e, true
}
