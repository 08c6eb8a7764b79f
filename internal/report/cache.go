package report

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

// ContentDigestAnnotation holds, on reports in the operator's cache only, the digest of the content ForCache
// stripped. It is never written to the cluster: Diff drops it from the metadata it carries into updates.
const ContentDigestAnnotation = "celaudit.io/content-digest"

// ForCache is the cache transform of PolicyReports and ClusterPolicyReports. It keeps what a reconcile reads
// of an existing report: its metadata, and each result's ID and timestamp (PreviousTimestamps). The rest of
// the results is replaced by a digest of the report's content, which is all Diff needs to tell whether a new
// build differs. A namespace with thousands of violations would otherwise keep megabytes of report content
// in the operator's memory. managedFields are dropped, as for every cached object.
//
// An informer may hand the transform an object it already transformed (a relist, a tombstone): a report that
// carries the digest is left as it is. Should a report in the cluster carry the annotation, the worst that
// follows is one update, which drops it.
func ForCache(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		if _, done := m.GetAnnotations()[ContentDigestAnnotation]; done {
			return obj, nil
		}
	}
	switch r := obj.(type) {
	case *v1alpha2.PolicyReport:
		compact(&r.ObjectMeta, &r.Results, policyContent(r))
	case *v1alpha2.ClusterPolicyReport:
		compact(&r.ObjectMeta, &r.Results, clusterContent(r))
	}
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// compact records c's digest on the report and keeps only the ID and timestamp of each of its results.
func compact(meta *metav1.ObjectMeta, results *[]v1alpha2.PolicyReportResult, c content) {
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[ContentDigestAnnotation] = c.digest()
	kept := make([]v1alpha2.PolicyReportResult, 0, len(*results))
	for _, r := range *results {
		k := v1alpha2.PolicyReportResult{Timestamp: r.Timestamp}
		if id, ok := r.Properties[audit.PropResultID]; ok {
			k.Properties = map[string]string{audit.PropResultID: id}
		}
		kept = append(kept, k)
	}
	*results = kept
}

// digest is a digest of the content. Two contents have equal digests exactly when their JSON encodings are
// equal: every slice and map of the types is omitempty, so nil and empty compare equal, as they do for
// equality.Semantic.
func (c content) digest() string {
	data, err := json.Marshal(c)
	if err != nil {
		return "" // never equal to a digest: the report is rewritten
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// cachedDigest returns the digest ForCache left on an existing report, if it did.
func cachedDigest(meta *metav1.ObjectMeta) (string, bool) {
	d, ok := meta.Annotations[ContentDigestAnnotation]
	return d, ok && d != ""
}
