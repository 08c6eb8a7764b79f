package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	auditv1alpha1 "github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/scan"
)

// ReaderAggregationLabel is the label of the ClusterRoles whose rules the cluster aggregates into celaudit's
// reader ClusterRole (config/rbac/aggregated_reader_role.yaml, the chart's "<fullname>-reader"): a team
// grants celaudit read access to its CRD group with one ClusterRole so labelled.
const ReaderAggregationLabel = "celaudit.io/aggregate-to-reader"

// forbiddenHint says, in the error result and Event of a resource celaudit may not read, how to grant it:
// the way that works with every install, the restricted one included, and needs no restart.
func forbiddenHint(maxBackoff time.Duration) string {
	if maxBackoff <= 0 {
		return fmt.Sprintf("to grant it, create a ClusterRole labelled %s: \"true\" with a rule allowing get, list and watch on it; "+
			"celaudit retries with backoff and reads it without a restart", ReaderAggregationLabel)
	}
	return fmt.Sprintf("to grant it, create a ClusterRole labelled %s: \"true\" with a rule allowing get, list and watch on it; "+
		"celaudit reads it within %s, without a restart", ReaderAggregationLabel, maxBackoff)
}

// readErrorEvents tells users, on each policy that covers it, that an audited resource cannot be read (a
// forbidden LIST, an aggregated API that is down), and again when it can: an error result in a report is
// easy to miss, `kubectl describe` on the policy is where users look. The scanner calls it once per change
// of the error, not per retry.
type readErrorEvents struct {
	// Reader reads the policy objects the events are about (the manager's cache holds them).
	Reader   client.Reader
	Recorder EventRecorder
	Log      logr.Logger
}

// ReadError implements scan.Options.OnReadError.
func (r *readErrorEvents) ReadError(gvr schema.GroupVersionResource, policies []audit.PolicyKey, err error) {
	ctx := context.Background()
	for _, key := range policies {
		obj := r.policyObject(ctx, key)
		if obj == nil {
			continue
		}
		if err != nil {
			note := fmt.Sprintf("Cannot read %s, so its objects are not audited: %v", scan.ResourceString(gvr), err)
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonResourceUnreadable, "Audit", "%s", report.TruncateMessage(note, maxNoteBytes))
			continue
		}
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonResourceReadable, "Audit",
			"%s can be read again and is audited", scan.ResourceString(gvr))
	}
}

// policyObject returns the object behind a policy, or nil when it is gone.
func (r *readErrorEvents) policyObject(ctx context.Context, key audit.PolicyKey) client.Object {
	obj, err := policyObject(ctx, r.Reader, key)
	if err != nil {
		r.Log.V(1).Info("Policy of an unreadable resource not found", "policy", key.String(), "err", err.Error())
	}
	return obj
}

// policyObject reads the object behind a policy, to record Events on: the CRD, the
// ValidatingAdmissionPolicy, the AuditPolicy or the MutatingAdmissionPolicy. It returns nil for keys of other sources, and with an error when it cannot be read.
func policyObject(ctx context.Context, reader client.Reader, key audit.PolicyKey) (client.Object, error) {
	var obj client.Object
	switch key.Source {
	case audit.SourceCRD:
		obj = &apiextensionsv1.CustomResourceDefinition{}
	case audit.SourceVAP:
		obj = &admissionregistrationv1.ValidatingAdmissionPolicy{}
	case audit.SourceAuditPolicy:
		obj = &auditv1alpha1.AuditPolicy{}
	case audit.SourceMAP:
		obj = &admissionregistrationv1.MutatingAdmissionPolicy{}
	default:
		return nil, nil
	}
	if err := reader.Get(ctx, client.ObjectKey{Name: key.Name}, obj); err != nil {
		return nil, fmt.Errorf("reading the object of policy %s: %w", key, err)
	}
	return obj, nil
}
