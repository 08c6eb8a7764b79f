// Command checkprofile runs `kubectl celaudit` with the arguments after its own flags, exactly as the plugin
// runs them, and records a CPU profile of the whole run: where `check` spends its CPU on the shared workload
// (test/bench/check.sh, BENCHMARKS.md).
//
//	go run ./test/bench/checkprofile -cpuprofile /tmp/check.pprof -- check -f objects/ --rules policies/ ...
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/celaudit/celaudit/internal/cli"
)

func main() {
	cpuProfile := flag.String("cpuprofile", "", "File the CPU profile of the run is written to.")
	memProfile := flag.String("memprofile", "", "File a heap profile (allocations of the whole run) is written to at the end.")
	flag.Parse()
	if *cpuProfile == "" {
		fmt.Fprintln(os.Stderr, "checkprofile: -cpuprofile is required")
		os.Exit(2)
	}
	os.Exit(run(*cpuProfile, *memProfile, flag.Args()))
}

// run runs the plugin with args under the CPU profiler and returns its exit code; a profile that cannot be
// written is exit code 2, as bad arguments are for the plugin.
func run(profile, memProfile string, args []string) int {
	f, err := os.Create(profile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkprofile:", err)
		return 2
	}
	defer func() { _ = f.Close() }()
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "checkprofile:", err)
		return 2
	}
	code := cli.Run(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, args)
	pprof.StopCPUProfile()
	if memProfile != "" {
		if err := writeHeapProfile(memProfile); err != nil {
			fmt.Fprintln(os.Stderr, "checkprofile:", err)
			return 2
		}
	}
	return code
}

// writeHeapProfile writes the heap profile, whose alloc_space sample counts every allocation of the run.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
