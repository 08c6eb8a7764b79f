// Command profiled is celaudit wired exactly as the main command, plus profiling for the benchmarks: it
// records a CPU profile from start-up; each SIGUSR1 then stops the running profile (and writes a heap
// profile) or starts the next one, so that the macro benchmark can profile the first audit and the update
// phases (go run ./test/bench/macro -profile DIR).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/celaudit/celaudit/controllers"
)

func main() {
	opts := controllers.DefaultOptions()
	opts.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(flag.CommandLine)
	cpuProfile := flag.String("cpuprofile", "", "Prefix of the CPU profiles: from start-up to the first SIGUSR1, then between pairs of SIGUSR1.")
	heapProfile := flag.String("heapprofile", "", "Prefix of the heap profiles written when each CPU profile stops.")
	flag.Parse()

	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger.WithName("upstream"))
	setupLog := ctrl.Log.WithName("setup")

	if err := startProfiles(*cpuProfile, *heapProfile); err != nil {
		setupLog.Error(err, "Unable to profile")
		os.Exit(1)
	}
	op, err := controllers.NewOperator(ctrl.GetConfigOrDie(), opts)
	if err != nil {
		setupLog.Error(err, "Unable to set up the manager")
		os.Exit(1)
	}
	if err := op.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}

// startProfiles records CPU profiles in segments: the first from start-up, each later one from one SIGUSR1 to
// the next. Each segment i is written to <cpuPath>-<i>.pprof, followed by a heap profile <heapPath>-<i>.pprof.
func startProfiles(cpuPath, heapPath string) error {
	if cpuPath == "" {
		return nil
	}
	segment := 1
	start := func() error {
		f, err := os.Create(fmt.Sprintf("%s-%d.pprof", cpuPath, segment))
		if err != nil {
			return fmt.Errorf("creating CPU profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("starting CPU profile: %w", err)
		}
		return nil
	}
	if err := start(); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		profiling := true
		for range sig {
			if !profiling {
				if err := start(); err != nil {
					fmt.Fprintln(os.Stderr, err)
					continue
				}
				profiling = true
				continue
			}
			pprof.StopCPUProfile()
			profiling = false
			if heapPath != "" {
				writeHeap(fmt.Sprintf("%s-%d.pprof", heapPath, segment))
			}
			segment++
		}
	}()
	return nil
}

func writeHeap(path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating heap profile:", err)
		return
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "writing heap profile:", err)
	}
}
