package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/celaudit/celaudit/internal/admit"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/manifests"
	"github.com/celaudit/celaudit/internal/report"
)

// checkOptions are the flags and inputs of `check`.
type checkOptions struct {
	files   []string
	rules   []string
	cluster bool
	// mutate prints the manifests as the MutatingAdmissionPolicies would leave them.
	mutate  bool
	workers int
	output  *outputOptions
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
}

func newCheckCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &checkOptions{
		flags:   flags,
		streams: streams,
		workers: runtime.GOMAXPROCS(0),
		output:  newOutputOptions(OutputTable, OutputJSON, OutputYAML, OutputJUnit),
	}
	cmd := &cobra.Command{
		Use:   "check -f MANIFESTS... [--rules FILE|DIR]... [--cluster]",
		Short: "Judge manifest files as the API server would judge their creation, offline, for CI",
		Long: `check evaluates the objects of manifest files with the CRD validation, ValidatingAdmissionPolicies,
AuditPolicies and MutatingAdmissionPolicies of a cluster, as the API server would judge a CREATE of each, and prints what it would
reject.

The rules are the CRDs, policies, bindings, params and Namespaces found in --rules and in the manifests
themselves, so that a GitOps repository checks itself; with --cluster they are read from the cluster of the
current kubeconfig context instead (select another with --context; --cluster is a switch here, not the
kubeconfig cluster name kubectl's --cluster flag takes elsewhere).

Before judging, a custom resource is pruned and defaulted by its CRD's schema and a built-in object gets the
API server's defaults. Not applied: ` + admit.NotAppliedButPolicies + `. An object the API
server refuses for its size (a request body over 3 MiB, a ConfigMap's or Secret's data over 1 MiB) gets that
result only, under apiserver/request-size (and the MutatingAdmissionPolicies', which run before the latter).

MutatingAdmissionPolicies among the rules are applied to each object as to its CREATE: a warn result names
the fields they would change. As on the API server, the other rules and the data limit then judge the object
as the policies leave it; a policy with failurePolicy Fail that fails refuses it before any validation.
--mutate prints the objects of -f as they would leave them (multi-document YAML in input order, unchanged
objects too; only their changes are added, not the API server's defaults; a Secret's values are never
changed in the output), and the results table on standard error.

Files may hold several YAML or JSON documents and Lists; directories are walked; - reads standard input.
Namespaced objects without a namespace are judged in --namespace (default "default"), as kubectl applies them.
The namespaces every cluster has (default, kube-system, kube-public, kube-node-lease) exist even when the
inputs do not hold them.

Exit codes: 0 nothing would be rejected; 1 objects would be rejected (fail or error results, and warn
results with --fail-on warn); 2 bad arguments or input files; 3 the cluster could not be read (--cluster).`,
		Example: `  # Check a GitOps repository against the rules it holds
  kubectl celaudit check -f deploy/

  # Check rendered manifests from stdin against policies kept elsewhere, as JUnit for the CI
  helm template . | kubectl celaudit check -f - --rules policies/ -o junit > report.xml

  # Check against the rules of a live cluster
  kubectl celaudit check -f deploy/ --cluster --context prod

  # Bring manifests in line with MutatingAdmissionPolicies
  kubectl celaudit check -f deploy/ --rules maps/ --mutate > deploy.mutated.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVarP(&o.files, "filename", "f", nil, "Manifest files or directories to check; - reads standard input. Repeatable.")
	fs.StringSliceVar(&o.rules, "rules", nil, "Files or directories of CRDs, policies, bindings, params and Namespaces to check against (not checked themselves). Repeatable.")
	// A local flag of the same name shadows the persistent --cluster of kubectl's connection flags for this
	// command only: `check --cluster` reads the rules of the current context's cluster.
	fs.BoolVar(&o.cluster, "cluster", false, "Read the rules from the cluster of the current (or --context) kubeconfig context instead of files.")
	o.output.AddFlags(fs)
	o.addMutateFlag(cmd)
	return cmd
}

// addMutateFlag adds --mutate, whose output is YAML unless -o says otherwise (which validate refuses).
func (o *checkOptions) addMutateFlag(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.mutate, "mutate", false, "Print the manifests of -f as the MutatingAdmissionPolicies would leave them "+
		"(with -o yaml, the default then), and the results table to standard error.")
	cmd.PreRun = func(cmd *cobra.Command, _ []string) {
		if o.mutate && !cmd.Flags().Changed("output") {
			o.output.Output = OutputYAML
		}
	}
}

func (o *checkOptions) validate() error {
	if err := o.output.Validate(); err != nil {
		return err
	}
	if len(o.files) == 0 {
		return BadInput("no manifests to check: give -f FILE|DIR|- (repeatable)")
	}
	if slices.Contains(o.files, manifests.Stdin) && slices.Contains(o.rules, manifests.Stdin) {
		return BadInput("standard input (-) can be read once: give it to -f or to --rules, not both")
	}
	if o.mutate && o.output.Output != OutputYAML {
		return BadInput("--mutate prints YAML manifests: it does not go with -o %s", o.output.Output)
	}
	if o.cluster && len(o.rules) > 0 {
		return BadInput("--rules and --cluster exclude each other: the rules come from files or from the cluster")
	}
	return nil
}

func (o *checkOptions) run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := o.validate(); err != nil {
		return err
	}
	verdicts, _ := o.output.ListVerdicts()

	in, err := o.readInputs()
	if err != nil {
		return err
	}
	defer in.close()

	var rs *ruleSet
	if o.cluster {
		rs, err = clusterRules(ctx, o.flags)
	} else {
		rs, err = fileRules(ctx, in)
	}
	if err != nil {
		return err
	}
	if err := rs.checkKinds(in); err != nil {
		return err
	}
	tally, err := evaluate(ctx, in, rs, evalOptions{
		workers:   o.workers,
		namespace: o.defaultNamespace(),
		list:      verdicts,
		mutations: o.mutate,
	})
	if err != nil {
		return err
	}

	if o.mutate {
		err = o.printMutated(in, rs, tally, verdicts)
	} else {
		err = o.print(o.streams.Out, rs, tally, verdicts)
	}
	if err != nil {
		return err
	}
	for _, note := range missingParamNotes(in, tally) {
		fmt.Fprintln(o.streams.ErrOut, "note: "+note)
	}
	if tally.builtinMatched > 0 {
		fmt.Fprintf(o.streams.ErrOut, "note: %d built-in objects were judged with the API server's defaults, but without %s\n",
			tally.builtinMatched, rs.notApplied())
	}
	if o.rejects(tally) {
		return Violations()
	}
	return nil
}

func (o *checkOptions) print(w io.Writer, rs *ruleSet, t *tally, list []audit.Verdict) error {
	switch o.output.Output {
	case OutputJSON, OutputYAML:
		// The reports the operator would write for these objects, built as it builds them.
		reports := report.BuildCounted(t.listed, t.passes, nil, time.Now(), report.Options{ListVerdicts: list})
		return PrintList(w, o.output.Output, ReportList(reports))
	case OutputJUnit:
		return printJUnit(w, rs, t, o.output)
	}
	return printCheckTable(w, rs, t, list)
}

// rejects reports whether any result counts for the exit code under --fail-on. An error result counts as a
// fail: the API server rejects a CREATE whose validation or policy errors (failurePolicy Fail; the results of
// a policy that ignores failures are not errors).
func (o *checkOptions) rejects(t *tally) bool {
	for _, c := range t.byPolicy {
		for v, n := range c.verdicts {
			if n > 0 && (v == audit.Error || o.output.Rejects(v)) {
				return true
			}
		}
	}
	return false
}

// defaultNamespace is the namespace of namespaced objects that name none: --namespace, or with --cluster the
// kubeconfig context's namespace, else "default", as kubectl applies such objects.
func (o *checkOptions) defaultNamespace() string {
	if o.flags.Namespace != nil && *o.flags.Namespace != "" {
		return *o.flags.Namespace
	}
	if o.cluster {
		if ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace(); err == nil && ns != "" {
			return ns
		}
	}
	return "default"
}

// inputError turns a problem reading the inputs into a BadInput error, keeping the file and line.
func inputError(err error) error {
	var me *manifests.Error
	if errors.As(err, &me) {
		return BadInput("%w", err)
	}
	return err
}
