package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/report"
)

// Output formats.
const (
	OutputTable = "table"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
	OutputJUnit = "junit"
)

// outputOptions are the flags every evaluating command shares: the format, the verdicts listed and what
// makes the exit code 1.
type outputOptions struct {
	Output  string
	Results string
	FailOn  string
	formats []string // accepted by -o
}

func newOutputOptions(formats ...string) *outputOptions {
	return &outputOptions{Output: OutputTable, Results: "fail,warn,error,skip", FailOn: string(audit.Fail), formats: formats}
}

// AddFlags adds -o, --results and --fail-on to fs.
func (o *outputOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.Output, "output", "o", o.Output, "Output format: "+strings.Join(o.formats, "|")+".")
	fs.StringVar(&o.Results, "results", o.Results,
		"Verdicts listed in the output, comma-separated among pass,fail,warn,error,skip, or 'all'. Every verdict is counted in the summaries.")
	fs.StringVar(&o.FailOn, "fail-on", o.FailOn, "Lowest verdict that makes the exit code 1: fail, or warn (warnings count too).")
}

// Validate checks the flags' values.
func (o *outputOptions) Validate() error {
	if !slices.Contains(o.formats, o.Output) {
		return BadInput("unknown output format %q: want one of %s", o.Output, strings.Join(o.formats, ", "))
	}
	if _, err := o.ListVerdicts(); err != nil {
		return err
	}
	if o.FailOn != string(audit.Fail) && o.FailOn != string(audit.Warn) {
		return BadInput("--fail-on %q: want fail or warn", o.FailOn)
	}
	return nil
}

// ListVerdicts returns the verdicts --results lists.
func (o *outputOptions) ListVerdicts() ([]audit.Verdict, error) {
	if strings.TrimSpace(o.Results) == "all" {
		return []audit.Verdict{audit.Pass, audit.Fail, audit.Warn, audit.Error, audit.Skip}, nil
	}
	out := []audit.Verdict{}
	for _, f := range strings.Split(o.Results, ",") {
		v := audit.Verdict(strings.TrimSpace(f))
		switch v {
		case audit.Pass, audit.Fail, audit.Warn, audit.Error, audit.Skip:
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		case "":
		default:
			return nil, BadInput("--results: unknown verdict %q: want pass, fail, warn, error, skip or all", v)
		}
	}
	return out, nil
}

// Rejects reports whether a result with verdict v counts for the exit code under --fail-on.
func (o *outputOptions) Rejects(v audit.Verdict) bool {
	return v == audit.Fail || (o.FailOn == string(audit.Warn) && v == audit.Warn)
}

// ReportList returns the reports as a v1 List, as `kubectl get -o json` prints several objects: cluster
// reports first, then namespaced reports by namespace and name (the order BuildCounted returns them in).
func ReportList(reports report.Reports) *metav1.List {
	list := &metav1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: []runtime.RawExtension{}}
	for i := range reports.ClusterPolicyReports {
		list.Items = append(list.Items, runtime.RawExtension{Object: &reports.ClusterPolicyReports[i]})
	}
	for i := range reports.PolicyReports {
		list.Items = append(list.Items, runtime.RawExtension{Object: &reports.PolicyReports[i]})
	}
	return list
}

// PrintList prints list as JSON (indented, as kubectl prints) or YAML.
func PrintList(w io.Writer, format string, list *metav1.List) error {
	data, err := json.MarshalIndent(list, "", "    ")
	if err != nil {
		return fmt.Errorf("encoding the reports: %w", err)
	}
	if format == OutputYAML {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return fmt.Errorf("encoding the reports: %w", err)
		}
	} else {
		data = append(data, '\n')
	}
	_, err = w.Write(data)
	return err
}
