// Command macro measures a whole celaudit audit on a real control plane (kube-apiserver and etcd from
// KUBEBUILDER_ASSETS): it stores N objects of four kinds across 100 namespaces, installs CRD rules and
// ValidatingAdmissionPolicies, runs the celaudit binary as a separate process and records the first audit's
// wall time against a bare LIST, memory, API requests while auditing and while idle, change-to-report latency,
// policy-edit latency and the size of the reports. It writes a markdown section and a JSON record.
//
//	go run ./test/bench/macro -objects 10000 -out bench-10000.md -json bench-10000.json
//	go run ./test/bench/macro -goals bench-10000.json,bench-100000.json -out goals.md
//	go run ./test/bench/macro -micro micro.txt -out micro.md
//	go run ./test/bench/macro -mutate -objects 10000 -out mutate-10000.md
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

type config struct {
	objects       int
	namespaces    int
	idle          time.Duration
	concurrency   int
	flips         int
	flipRate      float64
	baseline      bool
	bin           string
	build         bool
	workdir       string
	out           string
	jsonOut       string
	auditTimeout  time.Duration
	operatorFlags string
	operatorEnv   string
	goals         string
	micro         string
	profile       string
	auditPolicies int
	statusTimeout time.Duration
	// etcdSeed keeps the created objects' etcd data for later runs; seedOnly only creates it.
	etcdSeed          string
	seedOnly          bool
	quotaBackendBytes int64
	// replicas and gates select the replica table instead of the one-replica run; apiFeatureGates are
	// the API server's --feature-gates.
	replicas        string
	gates           string
	apiFeatureGates string
	// mutate selects the in-memory MutatingAdmissionPolicy run; cpuProfile is its CPU profile.
	mutate     bool
	cpuProfile string
}

func main() {
	c := parseFlags()
	ctrl.SetLogger(logr.Discard())
	if c.auditPolicies < 0 {
		fmt.Fprintln(os.Stderr, "macro: -audit-policies must not be negative")
		os.Exit(2)
	}

	var err error
	switch {
	case c.goals != "":
		err = writeGoals(c)
	case c.micro != "":
		err = writeMicro(c)
	case c.mutate:
		err = measureMutate(c)
	case c.replicas != "":
		err = measureReplicas(c)
	case c.seedOnly:
		err = seedOnly(c)
	default:
		err = measure(c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "macro:", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line.
func parseFlags() config {
	var c config
	flag.IntVar(&c.objects, "objects", 10000, "Audited objects to create.")
	flag.IntVar(&c.namespaces, "namespaces", 100, "Namespaces the objects are spread over.")
	flag.DurationVar(&c.idle, "idle", 5*time.Minute, "Length of the idle window in which API requests are counted.")
	flag.IntVar(&c.concurrency, "concurrency", 32, "Goroutines creating objects.")
	flag.IntVar(&c.flips, "flips", 1000, "Objects updated, each flipping compliance, to measure change-to-report latency.")
	flag.Float64Var(&c.flipRate, "flip-rate", 50, "Updates per second in the change-to-report phase.")
	flag.BoolVar(&c.baseline, "baseline", true, "Also run the operator on a cluster with the same policies and no audited objects, for bytes per object.")
	flag.StringVar(&c.bin, "bin", "", "celaudit binary (default: build <repo>/bin/celaudit).")
	flag.BoolVar(&c.build, "build", true, "Build the binary with go build before running it.")
	flag.StringVar(&c.workdir, "workdir", "", "Directory for the kubeconfig and operator logs (default: a new temporary directory).")
	flag.StringVar(&c.out, "out", "", "Write the markdown section here (default: standard output).")
	flag.StringVar(&c.jsonOut, "json", "", "Also write the measurements as JSON here.")
	flag.DurationVar(&c.auditTimeout, "audit-timeout", 30*time.Minute, "Give up waiting for the first audit after this long.")
	flag.StringVar(&c.operatorFlags, "operator-flags", "", "Extra flags for celaudit, space-separated.")
	flag.StringVar(&c.operatorEnv, "operator-env", "", "Extra environment for celaudit, space-separated NAME=value pairs (e.g. GOMEMLIMIT=200MiB).")
	flag.StringVar(&c.goals, "goals", "", "Instead of measuring: comma-separated JSON records to summarize against the product goals.")
	flag.StringVar(&c.profile, "profile", "", "Run the main measurement with a profiling build of celaudit (test/bench/profiled) and write the CPU profile of the first audit and a heap profile after it to this directory.")
	flag.IntVar(&c.auditPolicies, "audit-policies", 0, "AuditPolicies (enforcement Audit) to create beside the ValidatingAdmissionPolicies: ten distinct ones, repeated under new names past ten. Their statuses are checked against the model.")
	flag.DurationVar(&c.statusTimeout, "status-timeout", 2*time.Minute, "Give up waiting for the AuditPolicies' statuses to equal the model after this long.")
	flag.StringVar(&c.etcdSeed, "etcd-seed", "", "Keep the etcd data of the created CRDs, namespaces, params and objects in this directory and reuse it: when it holds the same -objects and -namespaces, the run starts its control plane on a copy of it instead of creating them again.")
	flag.BoolVar(&c.seedOnly, "seed-only", false, "Only create the -etcd-seed (if it does not exist yet) and exit.")
	flag.Int64Var(&c.quotaBackendBytes, "quota-backend-bytes", 8<<30, "etcd's --quota-backend-bytes (its default, 2 GiB, holds about 700,000 of the benchmark's objects).")
	flag.StringVar(&c.replicas, "replicas", "", "Instead of the one-replica run: comma-separated operator process counts (the first 1), each run over the same objects with static --shard-index/--shard-count, e.g. 1,2,3.")
	flag.StringVar(&c.gates, "gates", "on,off", "With -replicas: the API server's ShardedListAndWatch settings to run the counts under, on and/or off.")
	flag.StringVar(&c.micro, "micro", "", "Instead of measuring: a 'go test -bench' output file to turn into the micro benchmark table.")
	flag.BoolVar(&c.mutate, "mutate", false, "Instead of measuring on a control plane: evaluate -objects objects built in memory against MutatingAdmissionPolicies (internal/mutate) and the run's ValidatingAdmissionPolicies (internal/engine), and write the cost per (policy, object) pair.")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "With -mutate: write the CPU profile of the MutatingAdmissionPolicy evaluations here.")
	flag.Parse()
	return c
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[macro %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// signalContext is cancelled by SIGINT and SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func measure(c config) error {
	ctx, cancel := signalContext()
	defer cancel()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set: run through 'make bench' or set it to $(hack/setup-envtest.sh)")
	}
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	if c.workdir == "" {
		if c.workdir, err = os.MkdirTemp("", "celaudit-bench-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(c.workdir, 0o755); err != nil {
		return err
	}
	if c.bin == "" {
		c.bin = filepath.Join(repo, "bin", "celaudit")
	}
	code := codeVersion(repo)
	if err := build(c, repo, code); err != nil {
		return err
	}
	res := &Result{
		Code:        code,
		Profiled:    c.profile != "",
		Command:     "go run ./test/bench/macro " + strings.Join(os.Args[1:], " "),
		Machine:     machineInfo(),
		Objects:     c.objects,
		Namespaces:  c.namespaces,
		IdleSeconds: c.idle.Seconds(),
		Concurrency: c.concurrency,
	}
	if c.baseline {
		logf("baseline: same policies, no audited objects")
		if err := runBaseline(ctx, c, res); err != nil {
			return fmt.Errorf("baseline run: %w", err)
		}
	}
	logf("main run: %d objects", c.objects)
	runErr := runMain(ctx, c, res)
	if runErr != nil {
		res.Errors = append(res.Errors, runErr.Error())
	}
	if err := writeResult(c, res); err != nil {
		return err
	}
	return runErr
}

// seedOnly creates the -etcd-seed of -objects objects, unless it exists.
func seedOnly(c config) error {
	if c.etcdSeed == "" {
		return fmt.Errorf("-seed-only needs -etcd-seed")
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set: set it to $(hack/setup-envtest.sh)")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	_, err := ensureSeed(ctx, c, c.objects)
	return err
}

// build builds the operator from the code of repo (named code) unless -build=false, and the profiling
// variant with -profile.
func build(c config, repo, code string) error {
	if c.build {
		logf("building %s from %s", c.bin, code)
		if err := buildOperator(repo, c.bin); err != nil {
			return err
		}
	}
	if c.profile == "" {
		return nil
	}
	if err := os.MkdirAll(c.profile, 0o755); err != nil {
		return err
	}
	logf("building the profiling variant")
	return buildProfiled(repo, filepath.Join(c.workdir, "celaudit-profiled"))
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
