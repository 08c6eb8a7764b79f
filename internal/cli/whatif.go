package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/manifests"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/whatif"
)

// whatifOptions are the flags of `kubectl celaudit whatif`.
type whatifOptions struct {
	*outputOptions
	Filenames []string
	Binding   string
	Actions   []string
	ChunkSize int64
	Workers   int
	// Diff prints a unified diff per object the proposed MutatingAdmissionPolicies would change.
	Diff bool

	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	now     func() time.Time
}

func newWhatifCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &whatifOptions{
		outputOptions: newOutputOptions(OutputTable, OutputJSON, OutputYAML),
		ChunkSize:     whatif.DefaultPageSize,
		flags:         flags,
		streams:       streams,
		now:           time.Now,
	}
	cmd := &cobra.Command{
		Use:   "whatif -f FILE|DIR|- ... | --binding NAME --actions ACTIONS",
		Short: "What a proposed CRD, policy, binding or param change would reject, or change, among the objects already stored",
		Long: `whatif reads the stored objects that proposed CustomResourceDefinitions, ValidatingAdmissionPolicies,
bindings, AuditPolicies and param objects cover, and evaluates each under the live definition and under
the proposed one, with the kube-apiserver's own validation code. The proposal overlays the live cluster:
a proposed binding replaces the live one of that name, proposed params are read instead of live ones.

Each result says whether it is new (fails only under the proposal), fixed (fails only today) or
unchanged, and each failure what the object's next UPDATE meets: rejected (a policy denies every update
it matches, even a no-op one), ratcheted (a CRD rule on a field the update leaves unchanged passes) or
allowed (the bindings do not match updates).

Proposed MutatingAdmissionPolicies and their bindings replace the cluster's of the same names, and the
whole chain is evaluated, today's and the proposed: each stored object the proposed policies would change
on its next write (an UPDATE where a binding matches UPDATE, else a re-create) is listed with the policy,
the operation and the fields. --diff prints instead a unified diff per such object, as kubectl diff does,
of the object as stored against the object as the proposed chain leaves it. A Secret's values are never
printed.

-o json|yaml prints the PolicyReports the celaudit operator would write once the proposal is applied,
with the properties whatif and onUpdate added to each result (and a MutatingAdmissionPolicy's whole patch).

Exit codes: 0 nothing new would be rejected, 1 the proposal would newly reject objects (--fail-on warn:
or newly warn), 2 bad arguments or invalid files, 3 the cluster could not be reached or read.`,
		Example: `  # What would tightening the widgets CRD reject?
  kubectl celaudit whatif -f widgets-crd.yaml

  # What would the live binding require-team deny once switched from Warn to Deny?
  kubectl celaudit whatif --binding require-team --actions Deny

  # The reports the operator would write, as JSON
  kubectl celaudit whatif -f policies/ -o json

  # What a proposed MutatingAdmissionPolicy would change in the stored objects, as kubectl diff prints it
  kubectl celaudit whatif -f team-label-map.yaml --diff`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVarP(&o.Filenames, "filename", "f", nil, "Files or directories of the proposed objects, or - for standard input. Repeatable.")
	fs.StringVar(&o.Binding, "binding", "", "A live ValidatingAdmissionPolicyBinding to evaluate as if switched to --actions.")
	fs.StringSliceVar(&o.Actions, "actions", nil, "The validationActions of --binding: Deny, Warn, Audit, comma-separated.")
	fs.Int64Var(&o.ChunkSize, "chunk-size", o.ChunkSize, "Objects read per LIST request.")
	fs.IntVar(&o.Workers, "workers", 0, "Objects evaluated concurrently (default: the number of CPUs).")
	fs.BoolVar(&o.Diff, "diff", false, "Print, as kubectl diff does, a unified diff per stored object that the proposed MutatingAdmissionPolicies would change, instead of the table.")
	o.AddFlags(fs)
	return cmd
}

// validate checks the flags and returns the binding switch, nil without --binding.
func (o *whatifOptions) validate() (*whatif.Switch, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if len(o.Filenames) == 0 && o.Binding == "" {
		return nil, BadInput("nothing proposed: give -f FILE|DIR|- or --binding NAME --actions ACTIONS")
	}
	if o.ChunkSize <= 0 {
		return nil, BadInput("--chunk-size %d: want a positive number", o.ChunkSize)
	}
	if o.Workers < 0 {
		return nil, BadInput("--workers %d: want a positive number", o.Workers)
	}
	if o.Diff && o.Output != OutputTable {
		return nil, BadInput("--diff prints diffs: it does not go with -o %s", o.Output)
	}
	if (o.Binding == "") != (len(o.Actions) == 0) {
		return nil, BadInput("--binding and --actions go together")
	}
	if o.Binding == "" {
		return nil, nil
	}
	sw := &whatif.Switch{Binding: o.Binding}
	for _, a := range o.Actions {
		action := admissionregistrationv1.ValidationAction(strings.TrimSpace(a))
		switch action {
		case admissionregistrationv1.Deny, admissionregistrationv1.Warn, admissionregistrationv1.Audit:
		default:
			return nil, BadInput("--actions: unknown action %q: want Deny, Warn or Audit", a)
		}
		if slices.Contains(sw.Actions, action) {
			return nil, BadInput("--actions: %s given twice", action)
		}
		sw.Actions = append(sw.Actions, action)
	}
	// The API server rejects a binding with both (validation of ValidatingAdmissionPolicyBinding).
	if slices.Contains(sw.Actions, admissionregistrationv1.Deny) && slices.Contains(sw.Actions, admissionregistrationv1.Warn) {
		return nil, BadInput("--actions: Deny and Warn may not be used together: Deny already warns")
	}
	return sw, nil
}

func (o *whatifOptions) run(cmd *cobra.Command) error {
	outcome, list, err := o.evaluate(cmd.Context())
	if err != nil {
		return err
	}
	return o.print(outcome, list)
}

// evaluate runs the what-if: it returns the outcome and the verdicts to list.
func (o *whatifOptions) evaluate(ctx context.Context) (*whatif.Outcome, []audit.Verdict, error) {
	sw, err := o.validate()
	if err != nil {
		return nil, nil, err
	}
	objs, err := o.readProposal()
	if err != nil {
		return nil, nil, err
	}
	cluster, err := connectWhatif(ctx, o.flags)
	if err != nil {
		return nil, nil, err
	}
	pairs, err := planWhatif(ctx, cluster, objs, sw)
	if err != nil {
		return nil, nil, err
	}
	list, err := o.ListVerdicts()
	if err != nil {
		return nil, nil, err
	}
	outcome, err := whatif.Run(ctx, cluster.lister, cluster.servesResource, pairs, whatif.Options{
		Workers: o.Workers, PageSize: o.ChunkSize, List: list, Mutations: o.Diff,
	})
	if err != nil {
		var readErr *whatif.ReadError
		if errors.As(err, &readErr) {
			return nil, nil, ClusterError("%w", err)
		}
		return nil, nil, err
	}
	return outcome, list, nil
}

// readProposal reads the objects of the files given with -f; none without -f.
func (o *whatifOptions) readProposal() ([]manifests.Object, error) {
	if len(o.Filenames) == 0 {
		return nil, nil
	}
	objs, err := (manifests.Reader{Stdin: o.streams.In}).Read(o.Filenames)
	if err != nil {
		return nil, BadInput("%w", err)
	}
	if len(objs) == 0 {
		return nil, BadInput("%s: no objects", strings.Join(o.Filenames, ", "))
	}
	return objs, nil
}

// planWhatif decodes the proposal, checks its CRDs as the API server would, and pairs each policy it touches
// as it is in the cluster and as it would be.
func planWhatif(ctx context.Context, cluster *whatifCluster, objs []manifests.Object, sw *whatif.Switch) ([]*whatif.Pair, error) {
	proposal, err := whatif.Decode(objs, cluster.serves)
	if err != nil {
		return nil, whatifInputError(err)
	}
	live, err := cluster.live(ctx, proposal)
	if err != nil {
		return nil, err
	}
	if err := proposal.ValidateCRDs(ctx, live.CRDs); err != nil {
		return nil, whatifInputError(err)
	}
	if err := proposal.ValidateMAPs(); err != nil {
		return nil, whatifInputError(err)
	}
	// AuditPolicies are judged with the exemptions celaudit shows in their status, as it audits them.
	exemptions, err := statusExemptions(live.AuditPolicies...)
	if err != nil {
		return nil, err
	}
	// Patches are printed whole: the output is not a report of bounded size.
	compiler := engine.Compiler{Exemptions: exemptions, MAPDefaults: mutate.Defaults{FullPatch: true}}
	pairs, err := whatif.Plan(compiler, live, proposal, sw)
	if err != nil {
		return nil, whatifInputError(err)
	}
	return pairs, nil
}

// print writes the outcome as the output format asks, then its notes to standard error, and returns
// Violations when the proposal would reject (or, with --fail-on warn, warn about) what it did not before.
func (o *whatifOptions) print(outcome *whatif.Outcome, list []audit.Verdict) error {
	var err error
	switch {
	case o.Diff:
		for _, m := range outcome.Mutations() {
			if err = printMutationDiff(o.streams.Out, m.Object, m.Patch); err != nil {
				break
			}
		}
	case o.Output == OutputTable:
		err = printWhatifTable(o.streams.Out, outcome)
	default:
		reports := outcome.Reports(o.now(), report.Options{ListVerdicts: list})
		err = PrintList(o.streams.Out, o.Output, ReportList(reports))
	}
	if err != nil {
		return err
	}
	for _, note := range outcome.Notes() {
		fmt.Fprintln(o.streams.ErrOut, "note: "+note)
	}
	for _, s := range outcome.Summaries() {
		if s.NewRejections > 0 || o.Rejects(audit.Warn) && s.NewWarnings > 0 {
			return Violations()
		}
	}
	return nil
}

// inputError turns a problem of the proposal into ExitBadInput, and anything else (a failed read of the
// live objects) into ExitCluster.
func whatifInputError(err error) error {
	var input *whatif.InputError
	if errors.As(err, &input) {
		return BadInput("invalid proposal:\n%w", err)
	}
	return ClusterError("%w", err)
}

// printWhatifTable prints one line per policy with its counts, then one row per listed result.
func printWhatifTable(out io.Writer, outcome *whatif.Outcome) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POLICY\tMATCHED\tNEW\tFIXED\tUNCHANGED")
	for _, s := range outcome.Summaries() {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", s.Key, s.Matched, s.New, s.Fixed, s.Unchanged)
	}
	rows, mutations := splitMutationRows(outcome.Rows())
	// A CRD whose rows are in several versions (one the proposal adds, say) names the version of each.
	versions := map[audit.PolicyKey]map[string]bool{}
	for _, r := range rows {
		if v := r.Result.Properties[audit.PropCRDVersion]; v != "" {
			if versions[r.Key] == nil {
				versions[r.Key] = map[string]bool{}
			}
			versions[r.Key][v] = true
		}
	}
	if len(rows) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "WHATIF\tRESULT\tON UPDATE\tPOLICY\tNAMESPACE\tOBJECT\tMESSAGE")
		for _, r := range rows {
			res := r.Result
			message := whatifOneLine(res.Message)
			if len(versions[r.Key]) > 1 {
				message += " (version " + res.Properties[audit.PropCRDVersion] + ")"
			}
			onUpdate := r.OnUpdate
			if onUpdate == "" {
				onUpdate = "-"
			}
			namespace := res.Resource.Namespace
			if namespace == "" {
				namespace = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s/%s\t%s\n", r.Whatif, res.Verdict, onUpdate, r.Key, namespace,
				res.Resource.Kind, res.Resource.Name, message)
		}
	}
	printMutationRows(w, mutations)
	return w.Flush()
}

// printMutationRows prints one row per listed result of a MutatingAdmissionPolicy: the object, the request it
// is judged as and the fields the policy would change (or its error).
func printMutationRows(w io.Writer, mutations []whatif.Row) {
	if len(mutations) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "WHATIF\tRESULT\tPOLICY\tNAMESPACE\tOBJECT\tOPERATION\tFIELDS")
	for _, r := range mutations {
		res := r.Result
		namespace := res.Resource.Namespace
		if namespace == "" {
			namespace = "-"
		}
		fields := strings.ReplaceAll(res.Properties[mutate.PropFields], ",", ", ")
		switch {
		case res.Verdict == audit.Error:
			fields = "error: " + whatifOneLine(res.Message)
		case fields == "":
			fields = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s/%s\t%s\t%s\n", r.Whatif, res.Verdict, r.Key, namespace,
			res.Resource.Kind, res.Resource.Name, res.Properties[audit.PropOperation], fields)
	}
}

// splitMutationRows separates the rows of MutatingAdmissionPolicies, which say what would change rather than
// what would be rejected, from the others.
func splitMutationRows(rows []whatif.Row) (others, mutations []whatif.Row) {
	for _, r := range rows {
		if r.Key.Source == audit.SourceMAP {
			mutations = append(mutations, r)
		} else {
			others = append(others, r)
		}
	}
	return others, mutations
}

// whatifOneLine keeps a message on its table row and in its column.
func whatifOneLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", " ").Replace(s)
}
