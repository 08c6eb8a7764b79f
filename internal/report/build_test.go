package report

import (
	"encoding/json"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

// reportRef names a report for assertions: namespace ("" for a ClusterPolicyReport) and name.
type reportRef struct{ namespace, name string }

func refsOf(r Reports) []reportRef {
	var out []reportRef
	for _, p := range r.ClusterPolicyReports {
		out = append(out, reportRef{"", p.Name})
	}
	for _, p := range r.PolicyReports {
		out = append(out, reportRef{p.Namespace, p.Name})
	}
	return out
}

// allResults returns every report's results, in output order.
func allResults(r Reports) [][]v1alpha2.PolicyReportResult {
	var results [][]v1alpha2.PolicyReportResult
	for _, p := range r.ClusterPolicyReports {
		results = append(results, p.Results)
	}
	for _, p := range r.PolicyReports {
		results = append(results, p.Results)
	}
	return results
}

func TestBuildGroupsByNamespace(t *testing.T) {
	tests := []struct {
		name    string
		results []audit.Result
		want    []reportRef
	}{
		{name: "no results, no reports", results: nil, want: nil},
		{
			name:    "one namespace",
			results: []audit.Result{newResult(), newResult(withObject("team-a", "w2"))},
			want:    []reportRef{{"team-a", "celaudit"}},
		},
		{
			name: "namespaces sorted, cluster-scoped objects in the cluster report",
			results: []audit.Result{
				newResult(withObject("team-b", "w1")),
				newResult(withObject("", "global"), withKind("example.com/v1", "ClusterWidget")),
				newResult(withObject("team-a", "w1")),
			},
			want: []reportRef{{"", "celaudit"}, {"team-a", "celaudit"}, {"team-b", "celaudit"}},
		},
		{
			name:    "namespace with only passes still gets a report",
			results: []audit.Result{newResult(withObject("quiet", "w1"), withVerdict(audit.Pass))},
			want:    []reportRef{{"quiet", "celaudit"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildCounted(tt.results, nil, nil, scanTime(), Options{})
			if refs := refsOf(got); !slices.Equal(refs, tt.want) {
				t.Fatalf("reports = %v, want %v", refs, tt.want)
			}
			for _, p := range got.PolicyReports {
				if !IsManaged(&p) || p.Kind != "PolicyReport" || p.APIVersion != "wgpolicyk8s.io/v1alpha2" {
					t.Errorf("report %s/%s: labels %v, type %v", p.Namespace, p.Name, p.Labels, p.TypeMeta)
				}
				for _, r := range p.Results {
					if r.Resources[0].Namespace != p.Namespace {
						t.Errorf("report %s lists a result of namespace %q", p.Namespace, r.Resources[0].Namespace)
					}
				}
			}
			for _, p := range got.ClusterPolicyReports {
				if !IsManaged(&p) || p.Kind != "ClusterPolicyReport" || p.Namespace != "" {
					t.Errorf("cluster report %s: labels %v, type %v, namespace %q", p.Name, p.Labels, p.TypeMeta, p.Namespace)
				}
			}
		})
	}
}

func TestBuildResultFields(t *testing.T) {
	in := newResult(withProperty(audit.PropReason, "FieldValueInvalid"))
	inProps := len(in.Properties)
	got := BuildCounted([]audit.Result{in}, nil, nil, scanTime(), Options{})

	want := v1alpha2.PolicyReportResult{
		Source:    "celaudit",
		Policy:    "widgets.example.com",
		Rule:      "spec.replicas.x-kubernetes-validations[0]",
		Category:  "CRD Validation",
		Severity:  v1alpha2.SeverityMedium,
		Timestamp: metav1.Timestamp{Seconds: scanTime().Unix()},
		Result:    v1alpha2.StatusFail,
		Scored:    true,
		Resources: []corev1.ObjectReference{{
			APIVersion: "example.com/v1", Kind: "Widget", Namespace: "team-a", Name: "w1", UID: "uid-team-a-w1",
		}},
		Message: "replicas must be positive",
		Properties: map[string]string{
			audit.PropCRDVersion: "v1",
			audit.PropFieldPath:  "spec.replicas",
			audit.PropReason:     "FieldValueInvalid",
			audit.PropResultID:   in.ID(),
		},
	}
	if len(got.PolicyReports) != 1 || len(got.PolicyReports[0].Results) != 1 {
		t.Fatalf("got %+v, want one report with one result", got)
	}
	if r := got.PolicyReports[0].Results[0]; !equality.Semantic.DeepEqual(r, want) {
		t.Errorf("result =\n%+v\nwant\n%+v", r, want)
	}
	if len(in.Properties) != inProps {
		t.Errorf("BuildCounted modified the input properties: %v", in.Properties)
	}
}

func TestBuildListsAndCounts(t *testing.T) {
	all := []audit.Verdict{audit.Pass, audit.Fail, audit.Warn, audit.Error, audit.Skip}
	results := manyResults("team-a", 10, all...) // two of each verdict
	wantSummary := v1alpha2.PolicyReportSummary{Pass: 2, Fail: 2, Warn: 2, Error: 2, Skip: 2}

	tests := []struct {
		name       string
		opts       Options
		wantListed []v1alpha2.PolicyResult
	}{
		{
			name:       "default lists all but passes",
			wantListed: []v1alpha2.PolicyResult{"fail", "warn", "error", "skip"},
		},
		{
			name:       "passes listed too",
			opts:       listingPasses(),
			wantListed: []v1alpha2.PolicyResult{"pass", "fail", "warn", "error", "skip"},
		},
		{
			name:       "ListVerdicts selects",
			opts:       Options{ListVerdicts: []audit.Verdict{audit.Fail, audit.Error}},
			wantListed: []v1alpha2.PolicyResult{"fail", "error"},
		},
		{
			name:       "ListVerdicts selects passes",
			opts:       Options{ListVerdicts: []audit.Verdict{audit.Pass, audit.Fail}},
			wantListed: []v1alpha2.PolicyResult{"pass", "fail"},
		},
		{
			name:       "empty ListVerdicts keeps summaries only",
			opts:       Options{ListVerdicts: []audit.Verdict{}},
			wantListed: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildCounted(results, nil, nil, scanTime(), tt.opts)
			if len(got.PolicyReports) != 1 {
				t.Fatalf("got %d reports, want 1", len(got.PolicyReports))
			}
			rep := got.PolicyReports[0]
			if rep.Summary != wantSummary {
				t.Errorf("summary = %+v, want %+v", rep.Summary, wantSummary)
			}
			listed := map[v1alpha2.PolicyResult]int{}
			for _, r := range rep.Results {
				listed[r.Result]++
			}
			if len(rep.Results) != 2*len(tt.wantListed) {
				t.Errorf("listed %d results (%v), want %d", len(rep.Results), listed, 2*len(tt.wantListed))
			}
			for _, v := range tt.wantListed {
				if listed[v] != 2 {
					t.Errorf("listed %d %q results, want 2", listed[v], v)
				}
			}
		})
	}
}

func TestBuildNormalizesInvalidValues(t *testing.T) {
	tests := []struct {
		name         string
		in           audit.Result
		wantResult   v1alpha2.PolicyResult
		wantSeverity v1alpha2.PolicyResultSeverity
		wantProps    map[string]string
	}{
		{
			name:         "unknown verdict is published as an error",
			in:           newResult(withVerdict("maybe")),
			wantResult:   v1alpha2.StatusError,
			wantSeverity: v1alpha2.SeverityMedium,
		},
		{
			name:         "severity outside the enum is kept as a property",
			in:           newResult(withSeverity("urgent")),
			wantResult:   v1alpha2.StatusFail,
			wantSeverity: "",
			wantProps:    map[string]string{PropOriginalSeverity: "urgent"},
		},
		{
			name:         "empty severity stays empty",
			in:           newResult(withSeverity("")),
			wantResult:   v1alpha2.StatusFail,
			wantSeverity: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildCounted([]audit.Result{tt.in}, nil, nil, scanTime(), Options{})
			rep := got.PolicyReports[0]
			r := rep.Results[0]
			if r.Result != tt.wantResult || r.Severity != tt.wantSeverity {
				t.Errorf("result %q severity %q, want %q %q", r.Result, r.Severity, tt.wantResult, tt.wantSeverity)
			}
			if tt.wantResult == v1alpha2.StatusError && rep.Summary.Error != 1 {
				t.Errorf("summary = %+v, want one error", rep.Summary)
			}
			for k, v := range tt.wantProps {
				if r.Properties[k] != v {
					t.Errorf("property %s = %q, want %q", k, r.Properties[k], v)
				}
			}
		})
	}
}

func TestBuildDeduplicatesEqualResults(t *testing.T) {
	a := newResult()
	b := newResult() // same object, rule, verdict and message: the same result ID
	c := newResult(withMessage("another message"))
	got := BuildCounted([]audit.Result{a, b, c}, nil, nil, scanTime(), Options{})
	rep := got.PolicyReports[0]
	if rep.Summary.Fail != 2 || len(rep.Results) != 2 {
		t.Errorf("summary %+v with %d results, want 2 fails listed once each", rep.Summary, len(rep.Results))
	}
}

// variedResults returns results over several namespaces, objects, kinds, policies, rules and verdicts,
// including objects sharing a name and results differing only by message.
func variedResults() []audit.Result {
	var out []audit.Result
	verdicts := []audit.Verdict{audit.Pass, audit.Fail, audit.Warn, audit.Error, audit.Skip}
	for _, ns := range []string{"", "team-a", "team-b"} {
		for obj := range 4 {
			for _, kind := range []string{"Widget", "Gadget"} {
				for rule := range 3 {
					name := []string{"alpha", "beta", "gamma", "delta"}[obj]
					out = append(out, newResult(
						withObject(ns, name),
						withKind("example.com/v1", kind),
						withPolicy(strings.ToLower(kind)+"s.example.com"),
						withRule([]string{"spec.a", "spec.b", "spec.c"}[rule]),
						withVerdict(verdicts[(obj+rule)%len(verdicts)]),
					))
				}
			}
			out = append(out, newResult(withObject(ns, "alpha"), withMessage("second message on the same rule")))
		}
	}
	return out
}

func TestBuildIsDeterministic(t *testing.T) {
	base := variedResults()
	opts := listingPasses()
	opts.MaxResultsPerReport = 7
	want := BuildCounted(base, nil, nil, scanTime(), opts)
	wantJSON, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		shuffled := slices.Clone(base)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		got := BuildCounted(shuffled, nil, nil, scanTime(), opts)
		if !equality.Semantic.DeepEqual(got, want) {
			t.Fatalf("shuffle %d: reports differ", i)
		}
		gotJSON, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if string(gotJSON) != string(wantJSON) {
			t.Fatalf("shuffle %d: serialized reports differ", i)
		}
	}

	// Within a report, results follow the documented order.
	results := allResults(want)
	for _, rs := range results {
		for i := 1; i < len(rs); i++ {
			a, b := rs[i-1], rs[i]
			ka := []string{a.Resources[0].Name, a.Resources[0].Kind, a.Resources[0].APIVersion, string(a.Resources[0].UID), a.Policy, a.Rule, a.Properties[audit.PropResultID]}
			kb := []string{b.Resources[0].Name, b.Resources[0].Kind, b.Resources[0].APIVersion, string(b.Resources[0].UID), b.Policy, b.Rule, b.Properties[audit.PropResultID]}
			if slices.Compare(ka, kb) >= 0 {
				t.Errorf("results out of order: %v before %v", ka, kb)
			}
		}
	}
}

func TestBuildTimestamps(t *testing.T) {
	kept := newResult(withObject("team-a", "old"))
	fresh := newResult(withObject("team-a", "new"))
	pass := newResult(withObject("team-a", "ok"), withVerdict(audit.Pass))
	earlier := metav1.Timestamp{Seconds: 1_700_000_000, Nanos: 42}
	previous := map[string]metav1.Timestamp{
		kept.ID(): earlier,
		pass.ID(): earlier, // a pass listed by an earlier configuration
		"gone":    earlier,
	}
	nowTS := metav1.Timestamp{Seconds: scanTime().Unix()}

	tests := []struct {
		name string
		opts Options
		want map[string]metav1.Timestamp // by object name
	}{
		{
			name: "previous kept, new stamped now, unlisted pass absent",
			want: map[string]metav1.Timestamp{"old": earlier, "new": nowTS},
		},
		{
			name: "listed pass keeps its timestamp",
			opts: listingPasses(),
			want: map[string]metav1.Timestamp{"old": earlier, "new": nowTS, "ok": earlier},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildCounted([]audit.Result{kept, fresh, pass}, nil, previous, scanTime(), tt.opts)
			stamps := map[string]metav1.Timestamp{}
			for _, r := range got.PolicyReports[0].Results {
				stamps[r.Resources[0].Name] = r.Timestamp
			}
			if !equality.Semantic.DeepEqual(stamps, tt.want) {
				t.Errorf("timestamps = %v, want %v", stamps, tt.want)
			}
		})
	}
}

func TestBuildIsStableAcrossScans(t *testing.T) {
	results := variedResults()
	first := BuildCounted(results, nil, nil, scanTime(), Options{})
	later := BuildCounted(results, nil, PreviousTimestamps(first), scanTime().Add(time.Hour), Options{})
	if !equality.Semantic.DeepEqual(first, later) {
		t.Fatal("an unchanged audit an hour later produced different reports")
	}
	if ch := Diff(later, first); !ch.Empty() {
		t.Fatalf("an unchanged audit produced writes: %+v", ch)
	}

	// One result changes its message: only that result gets a new timestamp.
	changed := slices.Clone(results)
	i := slices.IndexFunc(changed, func(r audit.Result) bool { return r.Verdict == audit.Fail })
	changed[i].Message = "a new message"
	next := BuildCounted(changed, nil, PreviousTimestamps(first), scanTime().Add(time.Hour), Options{})
	nextStamps := PreviousTimestamps(next)
	newID := changed[i].ID()
	if _, ok := nextStamps[newID]; !ok {
		t.Fatalf("changed result %s not published", newID)
	}
	if len(nextStamps) != len(PreviousTimestamps(first)) {
		t.Errorf("%d results published, want %d", len(nextStamps), len(PreviousTimestamps(first)))
	}
	for id, ts := range nextStamps {
		wantSeconds := scanTime().Unix()
		if id == newID {
			wantSeconds = scanTime().Add(time.Hour).Unix()
		}
		if ts.Seconds != wantSeconds {
			t.Errorf("result %s stamped %d, want %d", id, ts.Seconds, wantSeconds)
		}
	}
}

func TestBuildChunks(t *testing.T) {
	longMessage := strings.Repeat("x", 3000)
	tests := []struct {
		name    string
		results []audit.Result
		opts    Options
		// wantReports is the exact number of reports; 0 asks for at least minReports.
		wantReports int
		minReports  int
		// maxListed and maxBytes bound every chunk's results; 0 skips the check.
		maxListed int
		maxBytes  int
	}{
		{
			name:       "10,000 violations, 1,000 per report",
			results:    manyResults("team-a", 10_000),
			opts:       Options{MaxResultsPerReport: 1000},
			minReports: 10,
			maxListed:  1000,
		},
		{
			name:       "count limit with passes interleaved",
			results:    withPassesAlongside(manyResults("team-a", 500, audit.Fail, audit.Warn), 3),
			opts:       Options{MaxResultsPerReport: 100},
			minReports: 5,
			maxListed:  100,
		},
		{
			name: "byte limit",
			results: func() []audit.Result {
				rs := manyResults("team-a", 500)
				for i := range rs {
					rs[i].Message += " " + longMessage
				}
				return withPassesAlongside(rs, 3)
			}(),
			opts:       Options{MaxReportBytes: 100_000},
			minReports: 16,
			maxBytes:   100_000,
		},
		{
			name: "default byte limit keeps reports under the object size limit",
			results: func() []audit.Result {
				rs := manyResults("team-a", 10_000)
				for i := range rs {
					rs[i].Message += " " + longMessage
				}
				return rs
			}(),
			minReports: 31,
			maxBytes:   DefaultMaxReportBytes,
		},
		{
			name:        "a result larger than the limit gets a report of its own",
			results:     manyResults("team-a", 3),
			opts:        Options{MaxReportBytes: 10},
			wantReports: 3,
		},
		{
			name:        "only passes: one report with the summary",
			results:     manyResults("team-a", 5000, audit.Pass),
			opts:        Options{MaxResultsPerReport: 10},
			wantReports: 1,
		},
		{
			name:        "what fits stays in one report",
			results:     manyResults("team-a", 100),
			opts:        Options{MaxResultsPerReport: 100},
			wantReports: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildCounted(tt.results, nil, nil, scanTime(), tt.opts)
			switch {
			case tt.wantReports > 0 && len(got.PolicyReports) != tt.wantReports:
				t.Fatalf("got %d reports, want %d", len(got.PolicyReports), tt.wantReports)
			case len(got.PolicyReports) < tt.minReports:
				t.Fatalf("got %d reports, want at least %d", len(got.PolicyReports), tt.minReports)
			}
			last := -1
			for _, rep := range got.PolicyReports {
				i, ok := ChunkIndex(rep.Name)
				if !ok {
					t.Fatalf("report %q is not named as a chunk", rep.Name)
				}
				if i <= last {
					t.Errorf("report %s follows chunk %d", rep.Name, last)
				}
				last = i
				if tt.maxListed > 0 && len(rep.Results) > tt.maxListed {
					t.Errorf("report %s lists %d results, limit %d", rep.Name, len(rep.Results), tt.maxListed)
				}
				if tt.maxBytes > 0 {
					b, err := json.Marshal(rep.Results)
					if err != nil {
						t.Fatal(err)
					}
					if len(b) > tt.maxBytes {
						t.Errorf("report %s results take %d bytes, limit %d", rep.Name, len(b), tt.maxBytes)
					}
					obj, err := json.Marshal(rep)
					if err != nil {
						t.Fatal(err)
					}
					if len(obj) > 1536*1024 {
						t.Errorf("report %s takes %d bytes, over the etcd object limit", rep.Name, len(obj))
					}
				}
			}
			assertSummariesAddUp(t, tt.results, got)
		})
	}
}

// A split namespace keeps each object in the chunk its UID selects: a change to one object's results rewrites
// that object's report only, where consecutive runs would shift every later chunk.
//
// Failing an object that only passes also shows which report counted its pass: the one rewritten, which then
// lists it. That places the passes of objects no report lists, which assertSummariesAddUp cannot place.
func TestBuildChunksAreStable(t *testing.T) {
	opts := Options{MaxResultsPerReport: 16}
	base := manyResults("team-a", 200, audit.Fail, audit.Pass, audit.Pass)
	byName := func(r Reports) map[string]v1alpha2.PolicyReport {
		out := map[string]v1alpha2.PolicyReport{}
		for _, rep := range r.PolicyReports {
			out[rep.Name] = rep
		}
		return out
	}
	lists := func(rep v1alpha2.PolicyReport, uid types.UID) bool {
		return slices.ContainsFunc(rep.Results, func(r v1alpha2.PolicyReportResult) bool { return r.Resources[0].UID == uid })
	}
	before := byName(BuildCounted(base, nil, nil, scanTime(), opts))
	if len(before) < 4 {
		t.Fatalf("got %d reports, want the namespace split", len(before))
	}
	passesOf := map[string]int{} // by report name: the passes of the objects found to be its own
	for i := range base {
		changed := slices.Clone(base)
		var delta v1alpha2.PolicyReportSummary
		if changed[i].Verdict == audit.Fail {
			changed[i].Verdict = audit.Pass // fixed
			delta.Pass, delta.Fail = 1, -1
		} else {
			changed[i].Verdict = audit.Fail // broken
			delta.Pass, delta.Fail = -1, 1
		}
		after := byName(BuildCounted(changed, nil, nil, scanTime(), opts))
		var differ []string
		for name, rep := range after {
			if !equality.Semantic.DeepEqual(rep, before[name]) {
				differ = append(differ, name)
			}
		}
		for name := range before {
			if _, ok := after[name]; !ok {
				differ = append(differ, name+" (deleted)")
			}
		}
		if len(differ) != 1 {
			t.Errorf("changing object %d rewrote %v, want exactly its own report", i, differ)
			continue
		}
		name, uid := differ[0], base[i].Resource.UID
		old, now := before[name], after[name]
		if base[i].Verdict == audit.Fail && !lists(old, uid) || base[i].Verdict == audit.Pass && !lists(now, uid) {
			t.Errorf("changing object %d rewrote %s, which does not list it", i, name)
		}
		want := old.Summary
		want.Pass += delta.Pass
		want.Fail += delta.Fail
		if now.Summary != want {
			t.Errorf("changing object %d moved the summary of %s from %+v to %+v, want %+v", i, name, old.Summary, now.Summary, want)
		}
		if base[i].Verdict == audit.Pass {
			passesOf[name]++
		}
	}
	for name, rep := range before {
		if want := (v1alpha2.PolicyReportSummary{Pass: passesOf[name], Fail: len(rep.Results)}); rep.Summary != want {
			t.Errorf("report %s: summary %+v, want %+v (its listed failures and the passes of its objects)", name, rep.Summary, want)
		}
	}
}

// assertSummariesAddUp checks every report's summary against the input. Its fail, warn, error and skip counts
// are the results it lists (the fixtures list all but passes), and its passes are those of the input on the
// objects it lists: every result of an object goes to the report its hash selects, or to the namespace's only
// report. A split namespace's object that has only passes is listed nowhere, so which report counts its passes
// cannot be told from the output: fixtures give such objects a listed result, and are refused otherwise. The
// summaries must also add up to the input's totals.
func assertSummariesAddUp(t *testing.T, in []audit.Result, got Reports) {
	t.Helper()
	type object struct {
		namespace string
		uid       types.UID
	}
	var want v1alpha2.PolicyReportSummary
	passes := map[object]int{}
	for _, r := range in {
		switch r.Verdict {
		case audit.Pass:
			want.Pass++
			passes[object{r.Resource.Namespace, r.Resource.UID}]++
		case audit.Fail:
			want.Fail++
		case audit.Warn:
			want.Warn++
		case audit.Error:
			want.Error++
		case audit.Skip:
			want.Skip++
		}
	}

	type report struct {
		namespace, name string
		summary         v1alpha2.PolicyReportSummary
		results         []v1alpha2.PolicyReportResult
	}
	var reports []report
	for _, r := range got.ClusterPolicyReports {
		reports = append(reports, report{"", r.Name, r.Summary, r.Results})
	}
	for _, r := range got.PolicyReports {
		reports = append(reports, report{r.Namespace, r.Name, r.Summary, r.Results})
	}
	perNamespace := map[string][]int{}
	listedIn := map[object][]int{} // the reports listing each object, by index in reports
	var tot v1alpha2.PolicyReportSummary
	for i, r := range reports {
		perNamespace[r.namespace] = append(perNamespace[r.namespace], i)
		for _, res := range r.results {
			o := object{res.Resources[0].Namespace, res.Resources[0].UID}
			if l := listedIn[o]; len(l) == 0 || l[len(l)-1] != i {
				listedIn[o] = append(l, i)
			}
		}
		tot.Pass += r.summary.Pass
		tot.Fail += r.summary.Fail
		tot.Warn += r.summary.Warn
		tot.Error += r.summary.Error
		tot.Skip += r.summary.Skip
	}
	if tot != want {
		t.Errorf("summaries add up to %+v, want %+v", tot, want)
	}

	wantPasses := make([]int, len(reports))
	for o, n := range passes {
		switch home := listedIn[o]; {
		case len(home) == 1:
			wantPasses[home[0]] += n
		case len(home) > 1:
			t.Fatalf("fixture: object %s/%s with passes is listed in several reports %v", o.namespace, o.uid, home)
		case len(perNamespace[o.namespace]) == 1:
			wantPasses[perNamespace[o.namespace][0]] += n
		default:
			t.Fatalf("fixture: object %s/%s has only passes in a split namespace", o.namespace, o.uid)
		}
	}
	for i, r := range reports {
		listed := v1alpha2.PolicyReportSummary{Pass: wantPasses[i]}
		for _, res := range r.results {
			switch res.Result {
			case v1alpha2.StatusFail:
				listed.Fail++
			case v1alpha2.StatusWarn:
				listed.Warn++
			case v1alpha2.StatusError:
				listed.Error++
			case v1alpha2.StatusSkip:
				listed.Skip++
			}
		}
		if r.summary != listed {
			t.Errorf("report %s/%s: summary %+v, want %+v (passes of the objects it lists)", r.namespace, r.name, r.summary, listed)
		}
	}
}

func TestTruncateMessage(t *testing.T) {
	tests := []struct {
		name string
		msg  string
		max  int
		want string
	}{
		{name: "short", msg: "abc", max: 20, want: "abc"},
		{name: "exactly the limit", msg: strings.Repeat("a", 20), max: 20, want: strings.Repeat("a", 20)},
		{name: "one over", msg: strings.Repeat("a", 21), max: 20, want: "aaaaa" + TruncationMarker},
		{name: "no limit", msg: strings.Repeat("a", 100), max: -1, want: strings.Repeat("a", 100)},
		{name: "cut inside a multi-byte rune", msg: "aaaa€€€€€€€€€€€€", max: 20, want: "aaaa" + TruncationMarker},
		{name: "limit below the marker", msg: strings.Repeat("a", 100), max: 3, want: TruncationMarker},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TruncateMessage(tt.msg, tt.max)
			if got != tt.want {
				t.Errorf("TruncateMessage = %q, want %q", got, tt.want)
			}
			if tt.max >= len(TruncationMarker) && len(got) > tt.max {
				t.Errorf("truncated to %d bytes, limit %d", len(got), tt.max)
			}
		})
	}
}

func TestBuildTruncatesMessages(t *testing.T) {
	long := newResult(withMessage(strings.Repeat("m", 10_000)))
	tests := []struct {
		name    string
		opts    Options
		wantLen int
	}{
		{name: "default limit", opts: Options{}, wantLen: DefaultMaxMessageBytes},
		{name: "custom limit", opts: Options{MaxMessageBytes: 100}, wantLen: 100},
		{name: "no limit", opts: Options{MaxMessageBytes: -1}, wantLen: 10_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := BuildCounted([]audit.Result{long}, nil, nil, scanTime(), tt.opts).PolicyReports[0].Results[0]
			if len(r.Message) != tt.wantLen {
				t.Errorf("message of %d bytes, want %d", len(r.Message), tt.wantLen)
			}
			if tt.wantLen < 10_000 && !strings.HasSuffix(r.Message, TruncationMarker) {
				t.Errorf("truncated message lacks the marker: ...%q", r.Message[len(r.Message)-20:])
			}
			// The ID identifies the full message, so truncation does not merge distinct results.
			if r.Properties[audit.PropResultID] != long.ID() {
				t.Errorf("resultID = %s, want %s", r.Properties[audit.PropResultID], long.ID())
			}
		})
	}
}

func TestChunkName(t *testing.T) {
	for i, want := range []string{"celaudit", "celaudit-1", "celaudit-2", "celaudit-10"} {
		idx := []int{0, 1, 2, 10}[i]
		if got := ChunkName(idx); got != want {
			t.Errorf("ChunkName(%d) = %q, want %q", idx, got, want)
		}
	}
}

// A namespace at a split boundary keeps its split: results coming and going at the limit do not move every
// object between chunks each time.
func TestBuildChunksKeepTheirSplit(t *testing.T) {
	opts := Options{MaxResultsPerReport: 16}
	base := manyResults("team-a", 40, audit.Fail)
	split := BuildCounted(base, nil, nil, scanTime(), opts)
	k := ChunkCounts(split)["team-a"]
	if k < 4 {
		t.Fatalf("40 results at 16 per report split into %d chunks, want at least 4", k)
	}
	// Fewer results fit half as many chunks: without the current split they would be reshuffled.
	fewer := base[:len(base)*2/3]
	if need := ChunkCounts(BuildCounted(fewer, nil, nil, scanTime(), opts))["team-a"]; need != k/2 {
		t.Fatalf("the fixture needs %d chunks after the removal, the test wants %d", need, k/2)
	}
	opts.Chunks = map[string]int{"team-a": k}
	kept := BuildCounted(fewer, nil, nil, scanTime(), opts)
	if got := ChunkCounts(kept)["team-a"]; got != k {
		t.Fatalf("split went from %d to %d chunks", k, got)
	}
	// Every remaining object stays in its chunk.
	where := func(r Reports) map[string]string {
		out := map[string]string{}
		for _, rep := range r.PolicyReports {
			for _, res := range rep.Results {
				out[res.Resources[0].Name] = rep.Name
			}
		}
		return out
	}
	before, after := where(split), where(kept)
	for name, chunk := range after {
		if before[name] != chunk {
			t.Errorf("%s moved from %s to %s", name, before[name], chunk)
		}
	}
	assertSummariesAddUp(t, fewer, kept)

	// A split four times as fine as needed is given up.
	opts.Chunks = map[string]int{"team-a": 4 * k}
	if got := ChunkCounts(BuildCounted(fewer, nil, nil, scanTime(), opts))["team-a"]; got != k/2 {
		t.Errorf("a split of %d chunks for results that fit %d became %d", 4*k, k/2, got)
	}
}

// Objects recreated under new UIDs count twice until the old ones are deleted, which can double the split for
// a while. Once the old ones are gone, a split twice as fine as needed that the results fill to less than a
// quarter is given up for the one needed, rather than kept for good.
func TestBuildCompactsSparseSplits(t *testing.T) {
	opts := Options{MaxResultsPerReport: 16}
	// Three results per object: an object's results stay together, so the split needed is uneven.
	var results []audit.Result
	for _, r := range manyResults("team-a", 60, audit.Fail) {
		for _, rule := range []string{"spec.a", "spec.b", "spec.c"} {
			results = append(results, newResult(withObject("team-a", r.Resource.Name), withRule(rule)))
		}
	}
	need := ChunkCounts(BuildCounted(results, nil, nil, scanTime(), opts))["team-a"]
	if 4*len(results) >= 2*need*16 {
		t.Fatalf("the fixture's %d results fill a split of %d chunks to a quarter or more", len(results), 2*need)
	}
	opts.Chunks = map[string]int{"team-a": 2 * need}
	got := BuildCounted(results, nil, nil, scanTime(), opts)
	if k := ChunkCounts(got)["team-a"]; k != need {
		t.Errorf("a sparse split of %d chunks became %d, want the %d needed", 2*need, k, need)
	}
	assertSummariesAddUp(t, results, got)
}

func TestChunkCounts(t *testing.T) {
	managed := func(ns, name string) v1alpha2.PolicyReport {
		return v1alpha2.PolicyReport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: managedLabels()}}
	}
	got := ChunkCounts(Reports{
		PolicyReports: []v1alpha2.PolicyReport{
			managed("a", "celaudit"), managed("a", "celaudit-5"), managed("b", "celaudit"),
			managed("c", "celaudit-x"), {ObjectMeta: metav1.ObjectMeta{Namespace: "d", Name: "celaudit-9"}},
			managed("e", "celaudit.1"), managed("e", "celaudit-2.1"),
		},
		ClusterPolicyReports: []v1alpha2.ClusterPolicyReport{{ObjectMeta: metav1.ObjectMeta{Name: "celaudit-2", Labels: managedLabels()}}},
	})
	want := map[string]int{"a": 8, "b": 1, "e": 4, "": 4}
	if !maps.Equal(got, want) {
		t.Errorf("ChunkCounts = %v, want %v", got, want)
	}
}
