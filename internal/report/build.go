package report

import (
	"encoding/json"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

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

// Options tune what BuildCounted lists and how large a report may grow. The zero value gives the defaults.
type Options struct {
	// ListVerdicts selects the verdicts whose results are listed in the reports' results. Results with
	// other verdicts are still counted in the summaries. Nil means DefaultListVerdicts(); an empty non-nil
	// slice lists nothing but summaries.
	ListVerdicts []audit.Verdict
	// MaxReportBytes bounds the estimated serialized size of the results of one report: a report is split
	// into chunks before it would grow past it. 0 means DefaultMaxReportBytes; negative means no limit.
	MaxReportBytes int
	// MaxResultsPerReport bounds the number of results listed in one report. 0 means no limit.
	MaxResultsPerReport int
	// Chunks holds the number of chunks each namespace's reports are split into now (see ChunkCounts). A
	// namespace keeps its split while it fits and a split half as fine would not, so that results moving
	// around a limit do not reshuffle every chunk back and forth.
	Chunks map[string]int
	// MaxMessageBytes bounds a result's message; longer messages are cut and end with TruncationMarker.
	// 0 means DefaultMaxMessageBytes; negative means no limit.
	MaxMessageBytes int
	// Taken holds, by namespace ("" for the cluster), the report names that chunks must not take (see
	// TakenNames): a chunk whose name is taken is named the first free alternative of it (see FreeChunkName).
	Taken map[string]sets.Set[string]
	// Annotations are set on every report, and Diff updates an existing report whose values of them differ
	// (the epoch of a sharded audit's member); annotations others set are kept. Nil sets none.
	Annotations map[string]string
}

// Reports is a set of reports: the desired ones BuildCounted returns, or the existing ones read from the cluster.
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
	verdict int  // verdictIndex of the published result
	count   int  // results the entry stands for: 1, or the number of counted passes (see BuildCounted)
	counted bool // counted passes: never listed
	listed  bool
	size    int // estimated serialized size of out, when listed
	out     v1alpha2.PolicyReportResult
	bucket  uint32 // hash of the object, which picks its chunk; set by chunk when the namespace is split
}

// CountedPasses are passes known only by their number: namespace ("" for cluster-scoped objects) -> object
// UID -> passes of that object that are not listed.
type CountedPasses map[string]map[types.UID]int

// BuildCounted returns the reports that publish results and passes: one PolicyReport per namespace holding
// namespaced objects and one ClusterPolicyReport for cluster-scoped objects, each split into chunks named
// ChunkName(i) so that none grows past the size limits of opts (see chunk), or an alternative of that name
// when opts.Taken holds it.
//
// passes are passes known only by their number (see CountedPasses; nil when every result is in results).
// Passes that are not listed carry nothing but their number, and a namespace holds thousands of them:
// counting them keeps a report write proportional to the results it lists. Each object's counted passes are
// summed in the report that holds the object's other results, so a change to one object still touches one
// report.
//
// previous maps the result IDs already published to their timestamps (see PreviousTimestamps): a result
// keeps the timestamp of when it last changed, and results not published before are stamped with now,
// truncated to the second. The output depends only on the arguments, not on the order of results: an
// unchanged input gives deeply equal reports, which serialize to identical bytes.
//
// Results with equal IDs (the same verdict with the same message for the same rule on the same object) are
// published once.
func BuildCounted(results []audit.Result, passes CountedPasses, previous map[string]metav1.Timestamp, now time.Time, opts Options) Reports {
	s := opts.settings()
	nowTS := metav1.Timestamp{Seconds: now.Unix()}
	sorted := dedupe(sortedEntries(results, passes))
	for _, e := range sorted {
		if !s.list[e.verdict] || e.counted {
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
		out.add(ns, chunk(sorted[start:end], s, opts.Chunks[ns]), opts)
		start = end
	}
	return out
}

// sortedEntries returns an entry for each result and for each object's counted passes, in the order of
// compareEntries.
func sortedEntries(results []audit.Result, passes CountedPasses) []*entry {
	counted := make([]audit.Result, 0, len(passes))
	counts := make([]int, 0, len(passes))
	for ns, byUID := range passes {
		for uid, n := range byUID {
			if n > 0 {
				counted = append(counted, audit.Result{Verdict: audit.Pass, Resource: audit.ObjectRef{Namespace: ns, UID: uid}})
				counts = append(counts, n)
			}
		}
	}
	entries := make([]entry, len(results)+len(counted))
	sorted := make([]*entry, len(entries))
	for i := range entries {
		e := &entries[i]
		e.count = 1
		if i < len(results) {
			e.res = &results[i]
		} else {
			e.res, e.count, e.counted = &counted[i-len(results)], counts[i-len(results)], true
		}
		idx, known := verdictIndex(e.res.Verdict)
		if !known {
			// Only the five verdicts of the API may be published; anything else is a defect of a rule
			// source, shown as an error rather than hidden.
			idx = idxError
		}
		e.verdict = idx
		sorted[i] = e
	}
	slices.SortFunc(sorted, compareEntries)
	return sorted
}

// add appends the reports of namespace ns ("" for the cluster-scoped objects), one per chunk that holds
// something, named as opts asks.
func (out *Reports) add(ns string, chunks []reportChunk, opts Options) {
	for i, c := range chunks {
		if len(c) == 0 {
			continue
		}
		summary, listed := c.contents()
		name := FreeChunkName(i, opts.Taken[ns])
		if ns == "" {
			out.ClusterPolicyReports = append(out.ClusterPolicyReports, v1alpha2.ClusterPolicyReport{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.GroupVersion.String(), Kind: "ClusterPolicyReport"},
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: managedLabels(), Annotations: maps.Clone(opts.Annotations)},
				Summary:    summary,
				Results:    listed,
			})
		} else {
			out.PolicyReports = append(out.PolicyReports, v1alpha2.PolicyReport{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.GroupVersion.String(), Kind: "PolicyReport"},
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: managedLabels(), Annotations: maps.Clone(opts.Annotations)},
				Summary:    summary,
				Results:    listed,
			})
		}
	}
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
	props := make(map[string]string, len(r.Properties)+2)
	for k, v := range r.Properties {
		props[k] = v
	}
	props[audit.PropResultID] = e.ID()
	// Not part of the ID: results kept their IDs (and so their timestamps, which dashboards key on) when the
	// property was added, and the rule the ID covers already tells a CRD's result from a policy's.
	if kind := r.PolicySource.Kind(); kind != "" {
		props[audit.PropPolicyKind] = kind
	}
	severity, ok := severityOf(r.Severity)
	if !ok {
		props[PropOriginalSeverity] = r.Severity
	}
	ts, seen := previous[e.ID()]
	if !seen {
		ts = now
	}
	return v1alpha2.PolicyReportResult{
		Source:     audit.Source,
		Policy:     r.Policy,
		Rule:       r.Rule,
		Category:   r.Category,
		Severity:   severity,
		Timestamp:  ts,
		Result:     resultOf(e.verdict),
		Scored:     true,
		Resources:  resourcesOf(r.Resource),
		Message:    TruncateMessage(r.Message, maxMessageBytes),
		Properties: props,
	}
}

// resourcesOf returns the resources of a result about ref. A result about no object (a resource that cannot be
// read names at most its kind) lists what it knows; a result that knows nothing lists nothing, rather than a
// blank reference, which readers such as Policy Reporter would show as an object without a name.
func resourcesOf(ref audit.ObjectRef) []corev1.ObjectReference {
	if ref == (audit.ObjectRef{}) {
		return nil
	}
	return []corev1.ObjectReference{{
		APIVersion: ref.APIVersion,
		Kind:       ref.Kind,
		Namespace:  ref.Namespace,
		Name:       ref.Name,
		UID:        ref.UID,
	}}
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

// TruncateMessage cuts msg to at most maxBytes bytes, marker included, on a UTF-8 boundary. A negative
// maxBytes means no limit. A limit shorter than the marker yields the marker alone.
func TruncateMessage(msg string, maxBytes int) string {
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

// chunk splits the sorted entries of one namespace into reports; chunk i becomes the report named
// ChunkName(i), and empty chunks are not written. A namespace that fits the limits gets one report. Past them,
// each object's entries go to the chunk its hash selects, among the fewest chunks (a power of two) that all
// fit: a change to one object then rewrites one chunk, not every chunk after it, and an API server write
// costs in proportion to the size of the object written. A namespace split into twice as many chunks as it
// needs (current) keeps that split while it is not sparse, so that a result that comes and goes at a limit
// does not move every object each time. When no such split exists (one object's results alone exceed the limits) the entries
// are cut into consecutive runs, so that every result still gets published; a result too large on its own
// then gets a chunk of its own, and counted passes follow their objects (see runs).
func chunk(entries []*entry, s settings, current int) []reportChunk {
	if current <= 1 && fits(entries, s) {
		return []reportChunk{entries} // the common case: no hashing
	}
	listed := 0
	for _, e := range entries {
		e.bucket = objectHash(&e.res.Resource)
		if e.listed {
			listed++
		}
	}
	// More chunks than four times the listed results would only spread them thinner.
	var need []reportChunk
	for k := 1; k <= max(1, 4*listed) && need == nil; k *= 2 {
		if c := bucketed(entries, k); !slices.ContainsFunc(c, func(c reportChunk) bool { return !fits(c, s) }) {
			need = c
		}
	}
	switch {
	case need == nil:
		return runs(entries, s)
	case 2*len(need) == current && !sparse(entries, s, current):
		// A split twice as fine as needed also fits: each chunk of it is half a chunk that fits.
		return bucketed(entries, current)
	}
	return need
}

// sparse reports whether the entries fill k chunks to less than a quarter of the limits on average. A split
// twice as fine as needed is kept only while it is not sparse: results that came and went (objects recreated
// under new UIDs count twice until the old ones are deleted) would otherwise leave a namespace in twice as
// many reports as it needs for good. A quarter keeps a margin above the point where the coarser split stops
// fitting, so results going back and forth at a limit still do not reshuffle the chunks.
func sparse(entries []*entry, s settings, k int) bool {
	count, size := 0, emptyArray
	for _, e := range entries {
		if e.listed {
			count++
			size += e.size
		}
	}
	byCount := s.maxResults > 0 && 4*count < k*s.maxResults
	bySize := s.maxReportBytes > 0 && 4*size < k*s.maxReportBytes
	return (s.maxResults <= 0 || byCount) && (s.maxReportBytes <= 0 || bySize)
}

// bucketed splits the entries into k chunks (k a power of two) by their objects' hashes. Chunk i of k splits
// into chunks i and i+k of 2k, so a finer split moves each object at most once.
func bucketed(entries []*entry, k int) []reportChunk {
	if k == 1 {
		return []reportChunk{entries}
	}
	chunks := make([]reportChunk, k)
	for _, e := range entries {
		i := e.bucket & uint32(k-1)
		chunks[i] = append(chunks[i], e)
	}
	return chunks
}

// fits reports whether the entries' listed results fit one report.
func fits(entries []*entry, s settings) bool {
	count, size := 0, emptyArray
	for _, e := range entries {
		if e.listed {
			count++
			size += e.size
		}
	}
	return (s.maxResults <= 0 || count <= s.maxResults) && (s.maxReportBytes <= 0 || size <= s.maxReportBytes)
}

// emptyArray is the size of an empty results array. Counting it once and each result with its separator
// gives exactly the length of the serialized array.
const emptyArray = 1

// runs cuts the entries into consecutive chunks (see cut) and adds each object's counted passes to the chunk
// that holds the object's first other entry, which lists the object when it has a listed result. The counted
// passes of an object with no other entry go by its hash, as in bucketed, to one of the first k chunks, k the
// largest power of two that the runs reach: such an object stays in its chunk when the cut moves around other
// objects, and moves at most once (from chunk i to i+k) when the runs grow past a power of two.
func runs(entries []*entry, s settings) []reportChunk {
	named := make([]*entry, 0, len(entries))
	var counted []*entry
	for _, e := range entries {
		if e.counted {
			counted = append(counted, e)
		} else {
			named = append(named, e)
		}
	}
	chunks := cut(named, s)
	if len(counted) == 0 {
		return chunks
	}
	home := map[types.UID]int{} // object UID -> its first chunk
	for i, c := range chunks {
		for _, e := range c {
			if uid := e.res.Resource.UID; uid != "" {
				if _, ok := home[uid]; !ok {
					home[uid] = i
				}
			}
		}
	}
	k := 1
	for 2*k <= len(chunks) {
		k *= 2
	}
	for _, e := range counted {
		i, ok := home[e.res.Resource.UID]
		if !ok {
			i = int(e.bucket & uint32(k-1))
		}
		chunks[i] = append(chunks[i], e)
	}
	return chunks
}

// cut cuts the entries into consecutive chunks. It walks every entry, listed or not, and starts a new chunk
// before a listed entry that would push the current chunk past the count or byte limit: at the first entry of
// that entry's object, so that the object's unlisted entries sorted before it go along, or at the entry itself
// when the chunk already lists the object (an object too large for one chunk). Other unlisted entries belong
// to the chunk they fall in. The chunks' capacities end with their lengths, so that appending to one does not
// overwrite the next.
func cut(entries []*entry, s settings) []reportChunk {
	var chunks []reportChunk
	start, count, size := 0, 0, emptyArray
	object, objectListed := 0, false // the first entry of the current object, and whether the chunk lists it
	for i, e := range entries {
		if i > 0 && !sameObject(entries[i-1], e) {
			object, objectListed = i, false
		}
		if !e.listed {
			continue
		}
		overCount := s.maxResults > 0 && count+1 > s.maxResults
		overSize := s.maxReportBytes > 0 && size+e.size > s.maxReportBytes
		if count > 0 && (overCount || overSize) {
			// The chunk lists something before the object unless it lists the object: the cut leaves it
			// something either way.
			at := i
			if !objectListed {
				at = object
			}
			chunks = append(chunks, entries[start:at:at])
			start, count, size = at, 0, emptyArray
		}
		count++
		size += e.size
		objectListed = true
	}
	return append(chunks, entries[start:len(entries):len(entries)])
}

// sameObject reports whether a and b are results on the same object: the same UID, or for results without
// one, the same reference. An object read in several versions of its resource is one object, as in bucketed.
func sameObject(a, b *entry) bool {
	ra, rb := &a.res.Resource, &b.res.Resource
	if ra.UID != "" || rb.UID != "" {
		return ra.UID == rb.UID
	}
	return *ra == *rb
}

// objectHash picks an object's chunk. It hashes the UID, which never changes for an object, and for results
// without one (a resource that cannot be read) what identifies the object instead.
func objectHash(r *audit.ObjectRef) uint32 {
	h := fnv.New32a()
	if r.UID != "" {
		_, _ = h.Write([]byte(r.UID))
	} else {
		_, _ = h.Write([]byte(r.APIVersion + "/" + r.Kind + "/" + r.Name))
	}
	return h.Sum32()
}

// contents returns the summary of every entry of the chunk and the results it lists.
func (c reportChunk) contents() (v1alpha2.PolicyReportSummary, []v1alpha2.PolicyReportResult) {
	var counts [numVerdicts]int
	n := 0
	for _, e := range c {
		counts[e.verdict] += e.count
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
