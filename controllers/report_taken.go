package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/celaudit/celaudit/internal/report"
)

// conflicted follows writes of namespace's reports that the API server refused because a report already
// exists (existed: the creates so refused) or changed since the cache showed it; taken holds the names the
// writes avoided.
//
// A report celaudit does not own may hold a name celaudit wants: that name is remembered as taken, and the
// namespace is built again after Coalesce, under names that avoid it. That report is never written. Otherwise
// the cache has yet to show celaudit's own last writes, which it does within MaxHold; conflicts that last
// longer are returned as errors.
func (r *ReportReconciler) conflicted(ctx context.Context, namespace string, taken sets.Set[string], existed []client.Object, err error) (ctrl.Result, error) {
	theirs, readErr := r.notOurs(ctx, existed)
	if readErr != nil {
		return ctrl.Result{}, readErr
	}
	for _, m := range theirs {
		r.nameTaken(ctx, namespace, taken, m)
	}
	if len(theirs) == 0 {
		if since := r.gate.conflicting(namespace, r.Clock.Now()); r.Clock.Since(since) >= r.MaxHold {
			return ctrl.Result{}, fmt.Errorf("report writes have been refused as conflicting since %s: %w", since.Format("15:04:05"), err)
		}
	}
	return ctrl.Result{RequeueAfter: r.Coalesce}, nil
}

// notOurs returns, of objs (reports whose creation was refused because the name is in use), those that
// celaudit does not own, as the API server holds them: the cache holds only celaudit's. Only their metadata
// is read.
func (r *ReportReconciler) notOurs(ctx context.Context, objs []client.Object) ([]*metav1.PartialObjectMetadata, error) {
	var out []*metav1.PartialObjectMetadata
	for _, o := range objs {
		gvk, err := apiutil.GVKForObject(o, r.Client.Scheme())
		if err != nil {
			return nil, fmt.Errorf("kind of report %s: %w", klog.KObj(o), err)
		}
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(o), m); err != nil {
			if apierrors.IsNotFound(err) {
				continue // gone since: the next write creates it
			}
			return nil, fmt.Errorf("reading report %s: %w", klog.KObj(o), err)
		}
		if !report.IsManaged(m) {
			m.SetGroupVersionKind(gvk) // an Event's reference needs it
			out = append(out, m)
		}
	}
	return out, nil
}

// nameTaken remembers that theirs, a report celaudit does not own, holds a name in namespace, and says so
// once, where users look: a Warning Event on that report, and a log line. taken holds the names already
// avoided.
func (r *ReportReconciler) nameTaken(ctx context.Context, namespace string, taken sets.Set[string], theirs *metav1.PartialObjectMetadata) {
	avoided, known := r.gate.takeName(namespace, theirs.Name, taken)
	if known {
		return
	}

	index, _ := report.ChunkIndex(theirs.Name) // celaudit creates only chunks
	instead := report.FreeChunkName(index, avoided)
	r.Events.Eventf(theirs, nil, corev1.EventTypeWarning, ReasonReportNameTaken, "Publishing",
		"This report lacks the label %s=%s, so celaudit leaves it alone and publishes the results it would write here as %s instead",
		report.ManagedByLabel, report.ManagedByValue, instead)
	ctrl.LoggerFrom(ctx).Info("A report celaudit does not own holds the name of one of its reports: publishing under another name",
		"report", klog.KObj(theirs), "kind", theirs.Kind, "instead", instead)
}
