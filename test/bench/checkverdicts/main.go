// Command checkverdicts converts the report List that `kubectl celaudit check -o json --results all` prints
// into the verdict table of the shared benchmark workload (expected/verdicts.tsv: policy, binding, namespace,
// kind, name, result, actions; one line per (policy, binding, object) the policy and binding match) and,
// with -expected, compares the two.
//
// The workload's result is the verdict a [Deny] binding would give: a violation is "fail" whatever the
// binding's actions, so check's warn results (violations under [Warn] or [Audit] bindings) are "fail". The
// workload's "excluded" lines are the pairs whose matchConditions are false: the API server admits those
// objects without a word, and so must check, so no result is expected for them, and one is reported as a
// result for an excluded pair.
//
//	kubectl-celaudit check -f objects/ --rules policies/ --rules params/ --rules crds/ --rules namespaces.yaml \
//	    -o json --results all | go run ./test/bench/checkverdicts -expected expected/verdicts.tsv
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

func main() {
	expected := flag.String("expected", "", "expected/verdicts.tsv of the workload to compare with")
	flag.Parse()
	lines, err := convert(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkverdicts:", err)
		os.Exit(2)
	}
	if *expected == "" {
		w := bufio.NewWriter(os.Stdout)
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		if err := w.Flush(); err != nil {
			os.Exit(2)
		}
		return
	}
	want, err := readTSV(*expected)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkverdicts:", err)
		os.Exit(2)
	}
	c := compare(want, lines)
	for _, l := range c.missing {
		fmt.Println("- " + l)
	}
	for _, l := range c.extra {
		fmt.Println("+ " + l)
	}
	for _, l := range c.excludedWithResult {
		fmt.Println("! " + l)
	}
	fmt.Println(c)
	if !c.ok() {
		os.Exit(1)
	}
}

// excluded is the result of the workload's lines whose pair the policy's matchConditions exclude.
const excluded = "excluded"

// comparison is the outcome of comparing check's lines with the workload's.
type comparison struct {
	expected, got int // lines expecting a result, lines from check
	equal         int
	// missing are expected lines check has not, extra lines of check not expected (results for excluded
	// pairs included), excludedWithResult the lines of check for a pair the workload says is excluded.
	missing, extra, excludedWithResult []string
	// excludedSilent counts the excluded pairs check gives no result for, as expected.
	excludedSilent, excludedTotal int
}

func (c comparison) ok() bool {
	return len(c.missing)+len(c.extra)+len(c.excludedWithResult) == 0
}

func (c comparison) String() string {
	return fmt.Sprintf("%d expected lines, %d from check: %d equal, %d missing, %d extra; %d of %d excluded pairs without a result",
		c.expected, c.got, c.equal, len(c.missing), len(c.extra), c.excludedSilent, c.excludedTotal)
}

// compare compares check's sorted lines with the workload's: want's lines whose result is excluded expect
// no line of check for their (policy, binding, object).
func compare(want, got []string) comparison {
	var expected []string
	excludedPairs := map[string]bool{}
	for _, l := range want {
		if resultOf(l) == excluded {
			excludedPairs[pairOf(l)] = true
			continue
		}
		expected = append(expected, l)
	}
	c := comparison{expected: len(expected), got: len(got), excludedTotal: len(excludedPairs)}
	c.missing, c.extra = diff(expected, got)
	c.equal = len(expected) - len(c.missing)
	withResult := map[string]bool{}
	for _, l := range got {
		if p := pairOf(l); excludedPairs[p] {
			c.excludedWithResult = append(c.excludedWithResult, l)
			withResult[p] = true
		}
	}
	c.excludedSilent = len(excludedPairs) - len(withResult)
	return c
}

// pairOf is a line's policy, binding and object (its first five fields).
func pairOf(line string) string {
	f := strings.SplitN(line, "\t", 6)
	return strings.Join(f[:min(5, len(f))], "\t")
}

// resultOf is a line's result (its sixth field).
func resultOf(line string) string {
	f := strings.Split(line, "\t")
	if len(f) < 6 {
		return ""
	}
	return f[5]
}

// convert reads a v1 List of PolicyReports and ClusterPolicyReports and returns its VAP results as sorted
// TSV lines.
func convert(r io.Reader) ([]string, error) {
	var list struct {
		Items []v1alpha2.PolicyReport `json:"items"`
	}
	if err := json.NewDecoder(r).Decode(&list); err != nil {
		return nil, fmt.Errorf("reading the report List: %w", err)
	}
	var out []string
	for _, report := range list.Items {
		for _, res := range report.Results {
			binding := res.Properties[audit.PropBinding]
			if binding == "" || len(res.Resources) == 0 {
				continue // not a result of a bound ValidatingAdmissionPolicy
			}
			result := string(res.Result)
			if result == string(audit.Warn) {
				result = string(audit.Fail)
			}
			ref := res.Resources[0]
			out = append(out, strings.Join([]string{res.Policy, binding, ref.Namespace, ref.Kind, ref.Name, result,
				res.Properties[audit.PropValidationActions]}, "\t"))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func readTSV(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for l := range strings.SplitSeq(string(data), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out, nil
}

// diff returns the lines of want not in got and those of got not in want; both are sorted.
func diff(want, got []string) (missing, extra []string) {
	i, j := 0, 0
	for i < len(want) || j < len(got) {
		switch {
		case j == len(got) || (i < len(want) && want[i] < got[j]):
			missing = append(missing, want[i])
			i++
		case i == len(want) || got[j] < want[i]:
			extra = append(extra, got[j])
			j++
		default:
			i++
			j++
		}
	}
	return missing, extra
}
