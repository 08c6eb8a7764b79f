package report

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

// ContentDigestAnnotation holds, on reports in the operator's cache only, the digest of the content ForCache
// stripped. It is never written to the cluster: Diff drops it from the metadata it carries into updates.
const ContentDigestAnnotation = "celaudit.io/content-digest"

// ResultTimestampsAnnotation holds, in the operator's cache only, the ID and timestamp of every result of a
// report (see ForCache). Like ContentDigestAnnotation it is never written to the cluster.
const ResultTimestampsAnnotation = "celaudit.io/result-timestamps"

// cacheAnnotations are the annotations ForCache adds, which Diff keeps out of the updates it makes.
var cacheAnnotations = []string{ContentDigestAnnotation, ResultTimestampsAnnotation}

// ForCache is the cache transform of PolicyReports and ClusterPolicyReports, and of OpenReports' Reports and
// ClusterReports. It keeps what a reconcile reads
// of an existing report: its metadata, and each result's ID and timestamp (PreviousTimestamps), as one
// string. The results themselves are replaced by a digest of the report's content, which is all Diff needs
// to tell whether a new build differs. A namespace with thousands of violations would otherwise keep
// megabytes of report content in the operator's memory. Even results cut down to their ID and timestamp
// kept a struct and a map each: about 580 bytes per listed result, against under 100 with the text, report
// metadata included (BenchmarkCachedRetained). managedFields are dropped, as for every cached object.
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
		compact(&r.ObjectMeta, &r.Results, policyContent(r).digest())
	case *v1alpha2.ClusterPolicyReport:
		compact(&r.ObjectMeta, &r.Results, clusterContent(r).digest())
	case *openreportsv1alpha1.Report:
		// Digested in the form Diff compares: FromReport's.
		p := FromReport(r)
		compact(&r.ObjectMeta, &p.Results, openDigest(r.Source, policyContent(&p)))
		r.Results = nil
	case *openreportsv1alpha1.ClusterReport:
		p := FromClusterReport(r)
		compact(&r.ObjectMeta, &p.Results, openDigest(r.Source, clusterContent(&p)))
		r.Results = nil
	}
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// openDigest is the digest of an OpenReports report's content c. The wgpolicyk8s.io form Diff compares has no
// top-level source: a report whose source is not celaudit's gets no digest, which Diff takes as different,
// so the source is written again.
func openDigest(source string, c content) string {
	if source != audit.Source {
		return ""
	}
	return c.digest()
}

// compact records digest and the ID and timestamp of each result on the report, and drops the results.
func compact(meta *metav1.ObjectMeta, results *[]v1alpha2.PolicyReportResult, digest string) {
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[ContentDigestAnnotation] = digest
	meta.Annotations[ResultTimestampsAnnotation] = encodeTimestamps(*results)
	*results = nil
}

// encodeTimestamps writes a line "seconds nanos id" for each result that has an ID. The ID comes last, so
// that any ID without a line break is read back whole; a result whose ID has one only loses its timestamp,
// which costs one more write of its report.
func encodeTimestamps(results []v1alpha2.PolicyReportResult) string {
	var b strings.Builder
	for i := range results {
		id := results[i].Properties[audit.PropResultID]
		if id == "" || strings.ContainsRune(id, '\n') {
			continue
		}
		ts := results[i].Timestamp
		b.WriteString(strconv.FormatInt(ts.Seconds, 10))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(int64(ts.Nanos), 10))
		b.WriteByte(' ')
		b.WriteString(id)
		b.WriteByte('\n')
	}
	return b.String()
}

// cachedTimestamps calls add with each ID and timestamp that compact recorded on a report, and reports
// whether the report holds them; lines that do not parse are skipped.
func cachedTimestamps(meta *metav1.ObjectMeta, add func(id string, ts metav1.Timestamp)) bool {
	enc, ok := meta.Annotations[ResultTimestampsAnnotation]
	if !ok {
		return false
	}
	for line := range strings.Lines(enc) {
		secs, rest, ok1 := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		nanos, id, ok2 := strings.Cut(rest, " ")
		s, err1 := strconv.ParseInt(secs, 10, 64)
		n, err2 := strconv.ParseInt(nanos, 10, 32)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || id == "" {
			continue
		}
		add(id, metav1.Timestamp{Seconds: s, Nanos: int32(n)})
	}
	return true
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
