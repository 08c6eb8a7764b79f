// Command kubectl-celaudit is the kubectl plugin of celaudit: what a proposed CRD or policy would reject among
// the objects already stored (whatif), the same verdicts on manifest files without a cluster (check), and
// per-policy readiness across celaudit's reports (summary). Install it on the PATH and run `kubectl celaudit`.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/celaudit/celaudit/internal/cli"
)

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	os.Exit(cli.Run(streams, os.Args[1:]))
}
