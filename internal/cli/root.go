package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"
)

// Run runs the command line args (without the program name) and returns the exit code. Errors are printed
// on streams.ErrOut, prefixed "error: " as kubectl does, except for ExitViolations whose output says it all.
func Run(streams genericiooptions.IOStreams, args []string) int {
	cmd, client := newRootCommand(streams)
	cmd.SetArgs(args)
	log := client.Logger()
	err := cmd.ExecuteContext(klog.NewContext(context.Background(), log))
	client.logThrottling(log)
	code := CodeOf(err)
	if err != nil && code != ExitViolations {
		fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
	}
	return int(code)
}

// newRootCommand returns the root command, `kubectl celaudit`, with kubectl's standard connection flags
// (--kubeconfig, --context, -n, ...) shared by every subcommand that reads a cluster, and the options of the
// clients they make: the clients of one run share one rate limiter and one warning printer (see
// clientOptions.wrap).
func newRootCommand(streams genericiooptions.IOStreams) (*cobra.Command, *clientOptions) {
	client := newClientOptions(streams.ErrOut)
	flags := genericclioptions.NewConfigFlags(true).WithWrapConfigFn(client.wrap)
	cmd := &cobra.Command{
		Use:   "kubectl-celaudit",
		Short: "Find the stored objects that break a cluster's CEL rules, before and after you tighten them",
		Long: `kubectl celaudit evaluates Kubernetes objects with the kube-apiserver's own CRD validation and
ValidatingAdmissionPolicy code, as the celaudit operator does:

  whatif   what a proposed CRD, policy or binding change would reject among the objects already stored
  check    the same verdicts on manifest files, offline, for CI
  summary  per policy, the results in celaudit's reports and whether it is safe to enforce

Exit codes: 0 nothing would be rejected, 1 objects would be (newly) rejected, 2 bad arguments or input
files, 3 the cluster could not be reached or read.`,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return client.Validate()
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			HiddenDefaultCmd: true,
		},
		Annotations: map[string]string{
			// kubectl shows the plugin as "kubectl celaudit" in usage lines.
			cobra.CommandDisplayNameAnnotation: "kubectl celaudit",
		},
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return BadInput("%w", err) })
	flags.AddFlags(cmd.PersistentFlags())
	client.AddFlags(cmd.PersistentFlags())
	// One line per subcommand, in the order help lists them.
	cmd.AddCommand(newWhatifCommand(flags, streams))
	cmd.AddCommand(newCheckCommand(flags, streams))
	cmd.AddCommand(newSummaryCommand(flags, streams))
	cmd.AddCommand(newExportCommand(flags, streams))
	cmd.AddCommand(newVersionCommand(streams))
	return cmd, client
}
