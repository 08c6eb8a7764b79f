package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// newVersionCommand prints the plugin's module version and the Kubernetes libraries it judges with, which
// fix the semantics it reproduces.
func newVersionCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of kubectl-celaudit and of the Kubernetes code it evaluates with",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			version, apiserver := "(devel)", "unknown"
			if info, ok := debug.ReadBuildInfo(); ok {
				if info.Main.Version != "" {
					version = info.Main.Version
				}
				for _, d := range info.Deps {
					if d.Path == "k8s.io/apiserver" {
						apiserver = d.Version
					}
				}
			}
			_, err := fmt.Fprintf(streams.Out, "kubectl-celaudit %s (k8s.io/apiserver %s)\n", version, apiserver)
			return err
		},
	}
}
