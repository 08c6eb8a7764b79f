package report

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

const (
	// DefaultMaxReportBytes bounds the serialized results of one report. etcd refuses objects over 1.5 MiB;
	// 1,000,000 bytes of results leave room for metadata, managed fields and estimation error.
	DefaultMaxReportBytes = 1_000_000
	// DefaultMaxMessageBytes bounds one result's message. CEL messageExpressions may produce up to 5 KiB
	// and rule sources may quote the offending value; a few KiB is all a reader looks at.
	DefaultMaxMessageBytes = 4096
	// TruncationMarker ends a message that was cut to the message size limit.
	TruncationMarker = " ...[truncated]"
	// PropOriginalSeverity holds a severity the PolicyReport schema does not accept. The result is
	// published without a severity rather than having the API server reject the whole report.
	PropOriginalSeverity = "severity"
)

// DefaultListVerdicts returns the verdicts listed in reports when Options.ListVerdicts is nil: everything
// but passes, which are only counted in the summary.
func DefaultListVerdicts() []audit.Verdict {
	return []audit.Verdict{audit.Fail, audit.Warn, audit.Error, audit.Skip}
}

// Options tune what Build lists and how large a report may grow. The zero value gives the defaults.
type Options struct {
	// ListVerdicts selects the verdicts whose results are listed in the reports' results. Results with
	// other verdicts are still counted in the summaries. Nil means DefaultListVerdicts(); an empty non-nil
	// slice lists nothing but summaries.
	ListVerdicts []audit.Verdict
	// IncludePass lists passing results too, in addition to ListVerdicts.
	IncludePass bool
	// MaxReportBytes bounds the estimated serialized size of the results of one report: a report is split
	// into chunks before it would grow past it. 0 means DefaultMaxReportBytes; negative means no limit.
	MaxReportBytes int
	// MaxResultsPerReport bounds the number of results listed in one report. 0 means no limit.
	MaxResultsPerReport int
	// MaxMessageBytes bounds a result's message; longer messages are cut and end with TruncationMarker.
	// 0 means DefaultMaxMessageBytes; negative means no limit.
	MaxMessageBytes int
}

// Reports is a set of reports: the desired ones Build returns, or the existing ones read from the cluster.
type Reports struct {
	PolicyReports        []v1alpha2.PolicyReport
	ClusterPolicyReports []v1alpha2.ClusterPolicyReport
}

// settings are Options with defaults applied.
type settings struct {
	list            [numVerdicts]bool // indexed by verdictIndex
	maxReportBytes  int               // <= 0: no limit
	maxResults      int               // <= 0: no limit
	maxMessageBytes int               // < 0: no limit
}

func (o Options) settings() settings {
	s := settings{
		maxReportBytes:  o.MaxReportBytes,
		maxResults:      o.MaxResultsPerReport,
		maxMessageBytes: o.MaxMessageBytes,
	}
	if s.maxReportBytes == 0 {
		s.maxReportBytes = DefaultMaxReportBytes
	}
	if s.maxMessageBytes == 0 {
		s.maxMessageBytes = DefaultMaxMessageBytes
	}
	verdicts := o.ListVerdicts
	if verdicts == nil {
		verdicts = DefaultListVerdicts()
	}
	for _, v := range verdicts {
		if i, ok := verdictIndex(v); ok {
			s.list[i] = true
		}
	}
	if o.IncludePass {
		s.list[idxPass] = true
	}
	return s
}

// Indexes of the verdicts of the PolicyReport API, for counting without maps.
const (
	idxPass = iota
	idxFail
	idxWarn
	idxError
	idxSkip
	numVerdicts
)

// verdictIndex maps a verdict of the PolicyReport API to its index.
func verdictIndex(v audit.Verdict) (int, bool) {
	switch v {
	case audit.Pass:
		return idxPass, true
	case audit.Fail:
		return idxFail, true
	case audit.Warn:
		return idxWarn, true
	case audit.Error:
		return idxError, true
	case audit.Skip:
		return idxSkip, true
	}
	return 0, false
}

// resultOf is the inverse of verdictIndex.
func resultOf(index int) v1alpha2.PolicyResult {
	switch index {
	case idxPass:
		return v1alpha2.StatusPass
	case idxFail:
		return v1alpha2.StatusFail
	case idxWarn:
		return v1alpha2.StatusWarn
	case idxSkip:
		return v1alpha2.StatusSkip
	}
	return v1alpha2.StatusError
}

// entry is one input result with everything derived from it computed once.
type entry struct {
	res     *audit.Result
	id      string
	verdict int // verdictIndex of the published result
	listed  bool
	size    int // estimated serialized size of out, when listed
	out     v1alpha2.PolicyReportResult
}

// Build returns the reports that publish results: one PolicyReport per namespace holding namespaced
// objects and one ClusterPolicyReport for cluster-scoped objects, each split into chunks named
// ChunkName(0), ChunkName(1), ... so that none grows past the size limits of opts.
//
// previous maps the result IDs already published to their timestamps (see PreviousTimestamps): a result
// keeps the timestamp of when it last changed, and results not published before are stamped with now,
// truncated to the second. The output depends only on the arguments, not on the order of results: an
// unchanged input gives deeply equal reports, which serialize to identical bytes.
//
// Results with equal IDs (the same verdict with the same message for the same rule on the same object) are
// published once.
func Build(results []audit.Result, previous map[string]metav1.Timestamp, now time.Time, opts Options) Reports {
	s := opts.settings()
	nowTS := metav1.Timestamp{Seconds: now.Unix()}

	entries := make([]entry, len(results))
	sorted := make([]*entry, len(results))
	for i := range results {
		e := &entries[i]
		e.res = &results[i]
		idx, known := verdictIndex(results[i].Verdict)
		if !known {
			// Only the five verdicts of the API may be published; anything else is a defect of a rule
			// source, shown as an error rather than hidden.
			idx = idxError
		}
		e.verdict = idx
		sorted[i] = e
	}
	slices.SortFunc(sorted, compareEntries)
	sorted = dedupe(sorted)

	for _, e := range sorted {
		if !s.list[e.verdict] {
			continue
		}
		e.listed = true
		e.out = publish(e, previous, nowTS, s.maxMessageBytes)
		if s.maxReportBytes > 0 {
			e.size = jsonSize(&e.out)
		}
	}

	var out Reports
	for start := 0; start < len(sorted); {
		ns := sorted[start].res.Resource.Namespace
		end := start + 1
		for end < len(sorted) && sorted[end].res.Resource.Namespace == ns {
			end++
		}
		for i, c := range chunk(sorted[start:end], s) {
			summary, listed := c.contents()
			if ns == "" {
				out.ClusterPolicyReports = append(out.ClusterPolicyReports, v1alpha2.ClusterPolicyReport{
					TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.GroupVersion.String(), Kind: "ClusterPolicyReport"},
					ObjectMeta: metav1.ObjectMeta{Name: ChunkName(i), Labels: managedLabels()},
					Summary:    summary,
					Results:    listed,
				})
			} else {
				out.PolicyReports = append(out.PolicyReports, v1alpha2.PolicyReport{
					TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.GroupVersion.String(), Kind: "PolicyReport"},
					ObjectMeta: metav1.ObjectMeta{Name: ChunkName(i), Namespace: ns, Labels: managedLabels()},
					Summary:    summary,
					Results:    listed,
				})
			}
		}
		start = end
	}
	return out
}

// compareEntries is the total order of published results: by object (namespace, name, kind, apiVersion,
// uid), then policy, rule and result ID. Category and severity, which the ID does not cover, break the
// remaining ties so that even duplicate IDs sort the same way whatever the input order.
func compareEntries(a, b *entry) int {
	ra, rb := &a.res.Resource, &b.res.Resource
	if c := strings.Compare(ra.Namespace, rb.Namespace); c != 0 {
		return c
	}
	if c := strings.Compare(ra.Name, rb.Name); c != 0 {
		return c
	}
	if c := strings.Compare(ra.Kind, rb.Kind); c != 0 {
		return c
	}
	if c := strings.Compare(ra.APIVersion, rb.APIVersion); c != 0 {
		return c
	}
	if c := strings.Compare(string(ra.UID), string(rb.UID)); c != 0 {
		return c
	}
	if c := strings.Compare(a.res.Policy, b.res.Policy); c != 0 {
		return c
	}
	if c := strings.Compare(a.res.Rule, b.res.Rule); c != 0 {
		return c
	}
	if c := strings.Compare(a.ID(), b.ID()); c != 0 {
		return c
	}
	if c := strings.Compare(a.res.Category, b.res.Category); c != 0 {
		return c
	}
	return strings.Compare(a.res.Severity, b.res.Severity)
}

// dedupe drops entries whose ID equals their predecessor's. The ID covers the object, policy and rule, which
// lead the sort order, so equal IDs are adjacent and the first one in the total order is kept.
func dedupe(sorted []*entry) []*entry {
	if len(sorted) < 2 {
		return sorted
	}
	out := sorted[:1]
	for _, e := range sorted[1:] {
		prev := out[len(out)-1]
		// Equal IDs imply the same object, policy and rule; only then are the IDs worth computing.
		if !sameSubject(prev, e) || e.ID() != prev.ID() {
			out = append(out, e)
		}
	}
	return out
}

// sameSubject reports whether a and b are results of the same rule on the same object.
func sameSubject(a, b *entry) bool {
	ra, rb := &a.res.Resource, &b.res.Resource
	return *ra == *rb && a.res.Policy == b.res.Policy && a.res.Rule == b.res.Rule
}

// ID returns the result's ID, computed on first use: a build hashes only the results it lists and the few
// that tie in the sort order, not the many passes it only counts.
func (e *entry) ID() string {
	if e.id == "" {
		e.id = e.res.ID()
	}
	return e.id
}

// publish converts a listed result into its PolicyReport form.
func publish(e *entry, previous map[string]metav1.Timestamp, now metav1.Timestamp, maxMessageBytes int) v1alpha2.PolicyReportResult {
	r := e.res
	props := make(map[string]string, len(r.Properties)+1)
	for k, v := range r.Properties {
		props[k] = v
	}
	props[audit.PropResultID] = e.ID()
	severity, ok := severityOf(r.Severity)
	if !ok {
		props[PropOriginalSeverity] = r.Severity
	}
	ts, seen := previous[e.ID()]
	if !seen {
		ts = now
	}
	return v1alpha2.PolicyReportResult{
		Source:    audit.Source,
		Policy:    r.Policy,
		Rule:      r.Rule,
		Category:  r.Category,
		Severity:  severity,
		Timestamp: ts,
		Result:    resultOf(e.verdict),
		Scored:    true,
		Resources: []corev1.ObjectReference{{
			APIVersion: r.Resource.APIVersion,
			Kind:       r.Resource.Kind,
			Namespace:  r.Resource.Namespace,
			Name:       r.Resource.Name,
			UID:        r.Resource.UID,
		}},
		Message:    truncateMessage(r.Message, maxMessageBytes),
		Properties: props,
	}
}

// severityOf returns the API severity of s. An empty severity is valid (the field is optional); any other
// value outside the schema's enum is not, and would make the API server reject the whole report.
func severityOf(s string) (v1alpha2.PolicyResultSeverity, bool) {
	switch s {
	case "", audit.SeverityCritical, audit.SeverityHigh, audit.SeverityMedium, audit.SeverityLow, audit.SeverityInfo:
		return v1alpha2.PolicyResultSeverity(s), true
	}
	return "", false
}

// truncateMessage cuts msg to at most maxBytes bytes, marker included, on a UTF-8 boundary. A negative
// maxBytes means no limit. A limit shorter than the marker yields the marker alone.
func truncateMessage(msg string, maxBytes int) string {
	if maxBytes < 0 || len(msg) <= maxBytes {
		return msg
	}
	cut := max(maxBytes-len(TruncationMarker), 0)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + TruncationMarker
}

// jsonSize estimates the bytes a result takes in a serialized report: its JSON encoding plus a separator.
func jsonSize(r *v1alpha2.PolicyReportResult) int {
	b, err := json.Marshal(r)
	if err != nil {
		// Cannot happen for this type (strings, ints, maps of strings); fall back to a generous estimate
		// rather than failing the whole build.
		return 2 * (len(r.Message) + len(r.Policy) + len(r.Rule) + 1024)
	}
	return len(b) + 1
}

// reportChunk is the run of sorted entries one report owns, listed or not.
type reportChunk []*entry

// chunk splits the sorted entries of one namespace into reports. It walks every entry, listed or not, and
// starts a new chunk at a listed entry that would push the current chunk past the count or byte limit;
// unlisted entries belong to the chunk they fall in. A result too large on its own still gets a chunk.
func chunk(entries []*entry, s settings) []reportChunk {
	// size counts the brackets of the results array once and each result with its separator, which is
	// exactly the length of the serialized array.
	const emptyArray = 1
	var chunks []reportChunk
	start, count, size := 0, 0, emptyArray
	for i, e := range entries {
		if !e.listed {
			continue
		}
		overCount := s.maxResults > 0 && count+1 > s.maxResults
		overSize := s.maxReportBytes > 0 && size+e.size > s.maxReportBytes
		if count > 0 && (overCount || overSize) {
			chunks = append(chunks, entries[start:i])
			start, count, size = i, 0, emptyArray
		}
		count++
		size += e.size
	}
	return append(chunks, entries[start:])
}

// contents returns the summary of every entry of the chunk and the results it lists.
func (c reportChunk) contents() (v1alpha2.PolicyReportSummary, []v1alpha2.PolicyReportResult) {
	var counts [numVerdicts]int
	n := 0
	for _, e := range c {
		counts[e.verdict]++
		if e.listed {
			n++
		}
	}
	var listed []v1alpha2.PolicyReportResult
	if n > 0 {
		listed = make([]v1alpha2.PolicyReportResult, 0, n)
		for _, e := range c {
			if e.listed {
				listed = append(listed, e.out)
			}
		}
	}
	return v1alpha2.PolicyReportSummary{
		Pass:  counts[idxPass],
		Fail:  counts[idxFail],
		Warn:  counts[idxWarn],
		Error: counts[idxError],
		Skip:  counts[idxSkip],
	}, listed
}

// BuildCounted is Build for results whose passes are partly only counted: passes[ns] more passes on objects
// of namespace ns ("" for cluster-scoped objects) are added to the summary of that namespace's first report.
// Passes that are not listed carry nothing but their number, and a namespace holds thousands of them:
// counting them keeps a report write proportional to the results it lists.
func BuildCounted(results []audit.Result, passes map[string]int, previous map[string]metav1.Timestamp, now time.Time, opts Options) Reports {
	out := Build(results, previous, now, opts)
	namespaces := make([]string, 0, len(passes))
	for ns, n := range passes {
		if n > 0 {
			namespaces = append(namespaces, ns)
		}
	}
	slices.Sort(namespaces)
	for _, ns := range namespaces {
		n := passes[ns]
		if ns == "" {
			if i := slices.IndexFunc(out.ClusterPolicyReports, func(r v1alpha2.ClusterPolicyReport) bool { return r.Name == ChunkName(0) }); i >= 0 {
				out.ClusterPolicyReports[i].Summary.Pass += n
				continue
			}
			out.ClusterPolicyReports = append(out.ClusterPolicyReports, v1alpha2.ClusterPolicyReport{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.GroupVersion.String(), Kind: "ClusterPolicyReport"},
				ObjectMeta: metav1.ObjectMeta{Name: ChunkName(0), Labels: managedLabels()},
				Summary:    v1alpha2.PolicyReportSummary{Pass: n},
			})
			continue
		}
		if i := slices.IndexFunc(out.PolicyReports, func(r v1alpha2.PolicyReport) bool { return r.Namespace == ns && r.Name == ChunkName(0) }); i >= 0 {
			out.PolicyReports[i].Summary.Pass += n
			continue
		}
		out.PolicyReports = append(out.PolicyReports, v1alpha2.PolicyReport{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.GroupVersion.String(), Kind: "PolicyReport"},
			ObjectMeta: metav1.ObjectMeta{Name: ChunkName(0), Namespace: ns, Labels: managedLabels()},
			Summary:    v1alpha2.PolicyReportSummary{Pass: n},
		})
	}
	return out
}
