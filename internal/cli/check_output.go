package cli

import (
	"encoding/xml"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/manifests"
	"github.com/celaudit/celaudit/internal/report"
)

// checkRow is one listed result with its policy and the place its object was read.
type checkRow struct {
	key    audit.PolicyKey
	result *audit.Result
	source manifests.Source // zero when unknown
}

// rows returns the listed results among the verdicts to list, by policy, then object, rule and message.
func (t *tally) rows(list []audit.Verdict) []checkRow {
	out := make([]checkRow, 0, len(t.listed))
	for i := range t.listed {
		r := &t.listed[i]
		if !slices.Contains(list, r.Verdict) {
			continue
		}
		out = append(out, checkRow{key: t.listedKeys[i], result: r, source: t.sources[keyOf(r.Resource)]})
	}
	slices.SortFunc(out, func(a, b checkRow) int {
		if c := a.key.Compare(b.key); c != 0 {
			return c
		}
		ra, rb := a.result, b.result
		for _, c := range []int{
			strings.Compare(ra.Resource.Namespace, rb.Resource.Namespace),
			strings.Compare(ra.Resource.Name, rb.Resource.Name),
			strings.Compare(ra.Resource.Kind, rb.Resource.Kind),
			strings.Compare(ra.Resource.APIVersion, rb.Resource.APIVersion),
			strings.Compare(ra.Rule, rb.Rule),
			strings.Compare(string(ra.Verdict), string(rb.Verdict)),
			strings.Compare(ra.Message, rb.Message),
			strings.Compare(ra.ID(), rb.ID()),
		} {
			if c != 0 {
				return c
			}
		}
		return 0
	})
	return out
}

// objectName names an object as namespace/Kind/name (Kind/name when cluster-scoped).
func objectName(r audit.ObjectRef) string {
	if r.Namespace == "" {
		return r.Kind + "/" + r.Name
	}
	return r.Namespace + "/" + r.Kind + "/" + r.Name
}

// oneLine returns a message fit for a table cell: on one line, at most the report's message size.
func oneLine(msg string) string {
	return strings.Join(strings.Fields(report.TruncateMessage(msg, report.DefaultMaxMessageBytes)), " ")
}

var tableVerdicts = []audit.Verdict{audit.Pass, audit.Fail, audit.Warn, audit.Error, audit.Skip}

// printCheckTable prints one summary line per policy, then one row per listed result, then the totals.
func printCheckTable(w io.Writer, rs *ruleSet, t *tally, list []audit.Verdict) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tOBJECTS\tPASS\tFAIL\tWARN\tERROR\tSKIP")
	for _, key := range t.policyKeys(rs) {
		c := t.counts(key)
		fmt.Fprintf(tw, "%s\t%d", key, c.objects)
		for _, v := range tableVerdicts {
			fmt.Fprintf(tw, "\t%d", c.verdicts[v])
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rows := t.rows(list); len(rows) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RESULT\tPOLICY\tRULE\tOBJECT\tSOURCE\tMESSAGE")
		for _, r := range rows {
			// The rule name tells results of one object apart: it names the binding and param (see audit.RuleName).
			rule := r.result.Rule
			if rule == "" {
				rule = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.result.Verdict, r.key, rule, objectName(r.result.Resource), r.source, oneLine(r.result.Message))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "\n%d objects checked, %d matched by no policy.\n", t.objects, t.unmatched)
	return err
}

// JUnit XML, as GitLab, Jenkins and most CI systems read it: <testsuites> of <testsuite>s of <testcase>s,
// each passing or holding <failure> or <skipped>.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Properties []junitProperty `xml:"properties>property,omitempty"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	File      string        `xml:"file,attr,omitempty"`
	Line      string        `xml:"line,attr,omitempty"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// printJUnit prints one testsuite per policy and one testcase per listed result of it: fail and error
// results are failures (warn results too under --fail-on warn), skip results are skipped, the others pass.
// Passes that are not listed (see --results) are counted in the suite's properties, not as testcases.
func printJUnit(w io.Writer, rs *ruleSet, t *tally, out *outputOptions) error {
	list, _ := out.ListVerdicts()
	rows := t.rows(list)
	doc := junitSuites{Name: "kubectl celaudit check"}
	for _, key := range t.policyKeys(rs) {
		c := t.counts(key)
		suite := junitSuite{Name: key.String(), Time: "0", Properties: []junitProperty{
			{Name: "matchedObjects", Value: strconv.Itoa(c.objects)},
		}}
		for _, v := range tableVerdicts {
			suite.Properties = append(suite.Properties, junitProperty{Name: string(v), Value: strconv.Itoa(c.verdicts[v])})
		}
		for _, r := range rows {
			if r.key != key {
				continue
			}
			suite.Cases = append(suite.Cases, junitCaseOf(r, out))
			tc := &suite.Cases[len(suite.Cases)-1]
			switch {
			case tc.Failure != nil:
				suite.Failures++
			case tc.Skipped != nil:
				suite.Skipped++
			}
		}
		suite.Tests = len(suite.Cases)
		doc.Tests += suite.Tests
		doc.Failures += suite.Failures
		doc.Skipped += suite.Skipped
		doc.Suites = append(doc.Suites, suite)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("encoding the JUnit report: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func junitCaseOf(r checkRow, out *outputOptions) junitCase {
	res := r.result
	name := objectName(res.Resource)
	if res.Rule != "" {
		name += " " + res.Rule
	}
	tc := junitCase{Name: name, Classname: r.key.String(), Time: "0"}
	if r.source.File != "" {
		tc.File, tc.Line = r.source.File, strconv.Itoa(r.source.Line)
	}
	msg := report.TruncateMessage(res.Message, report.DefaultMaxMessageBytes)
	detail := fmt.Sprintf("%s: %s\n%s %s", res.Verdict, msg, res.Resource.APIVersion, objectName(res.Resource))
	if r.source.File != "" {
		detail += " at " + r.source.String()
	}
	switch {
	case res.Verdict == audit.Fail || res.Verdict == audit.Error || out.Rejects(res.Verdict):
		tc.Failure = &junitMessage{Message: msg, Type: string(res.Verdict), Text: detail}
	case res.Verdict == audit.Skip:
		tc.Skipped = &junitMessage{Message: msg}
	case res.Verdict == audit.Warn:
		tc.SystemOut = detail
	}
	return tc
}
