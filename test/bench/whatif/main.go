// Command whatif measures `kubectl celaudit whatif` of a tightened CRD against a bare paginated LIST of the
// same resource, on a real control plane (kube-apiserver and etcd from KUBEBUILDER_ASSETS). It stores N
// custom resources (one in twenty breaks the rule the proposal adds), then alternates, -rounds times: a bare
// LIST of every object in pages of 500 (client-go's dynamic client, as kubectl get does, and the listjson
// client whatif itself reads with) and a whatif run of the kubectl-celaudit binary in a process of its own,
// whose wall time, CPU time and peak RSS are recorded. It prints a markdown table of the medians.
//
// With -policies P, the objects are spread over P CRDs (Thing0 ... Thing<P-1>) and the proposal holds many
// policies, as a rollout of a policy library does: the P CRDs tightened, and for each a
// ValidatingAdmissionPolicy and its binding (Deny), which one object in thirteen fails. The bare LISTs read every
// CRD's objects, one resource after the other, as whatif does. -cpuprofile writes a CPU profile of one more
// whatif run, in process.
//
//	KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh) go run ./test/bench/whatif -objects 10000,30000
//	KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh) go run ./test/bench/whatif -objects 3000 -policies 40 -cpuprofile whatif.pprof
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/cli"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/test/envtestutil"
)

const (
	group      = "whatif.bench.celaudit.io"
	namespaces = 10
	pageSize   = 500
)

// fixture is the CRDs the objects are spread over and what the proposal holds.
type fixture struct {
	// kinds are the CRDs' kinds: Thing alone, or Thing0 ... Thing<P-1> with -policies P.
	kinds []string
	// policies adds a ValidatingAdmissionPolicy and binding for each kind to the proposal.
	policies bool
}

func newFixture(policies int) fixture {
	if policies == 0 {
		return fixture{kinds: []string{"Thing"}}
	}
	f := fixture{policies: true}
	for i := range policies {
		f.kinds = append(f.kinds, "Thing"+strconv.Itoa(i))
	}
	return f
}

func resourceOf(kind string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: "v1", Resource: strings.ToLower(kind) + "s"}
}

// live is the CRDs as stored before the proposal.
func (f fixture) live() string {
	var docs []string
	for _, k := range f.kinds {
		docs = append(docs, crd(k, false))
	}
	return strings.Join(docs, "---\n")
}

// proposal is the CRDs tightened and, with policies, a policy and binding for each.
func (f fixture) proposal() string {
	var docs []string
	for _, k := range f.kinds {
		docs = append(docs, crd(k, true))
		if f.policies {
			docs = append(docs, policy(k))
		}
	}
	return strings.Join(docs, "---\n")
}

// policy returns the ValidatingAdmissionPolicy and binding (Deny) of kind's objects: the image must come
// from the registry and be tagged 1.0 to 1.11 (one object in thirteen has 1.12).
func policy(kind string) string {
	name := "bench-" + strings.ToLower(kind)
	return `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: ` + name + `}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [` + group + `]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [` + resourceOf(kind).Resource + `]
  validations:
  - expression: "object.spec.image.startsWith('registry.example.com/') && !object.spec.image.endsWith(':1.12')"
    messageExpression: "'image ' + object.spec.image + ' is not allowed'"
  - expression: "object.spec.owner.startsWith('team-')"
    message: the owner must be a team
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: ` + name + `}
spec:
  policyName: ` + name + `
  validationActions: [Deny]
`
}

// crd returns the CRD of kind: owner at most 16 bytes; tightened, replicas must also be even.
func crd(kind string, tightened bool) string {
	rule := ""
	if tightened {
		rule = `
            x-kubernetes-validations:
            - rule: "self.replicas % 2 == 0"
              message: replicas must be even`
	}
	return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: ` + resourceOf(kind).Resource + `.` + group + `}
spec:
  group: ` + group + `
  names: {kind: ` + kind + `, listKind: ` + kind + `List, plural: ` + resourceOf(kind).Resource + `, singular: ` + strings.ToLower(kind) + `}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer}
              owner: {type: string, maxLength: 16}
              image: {type: string}
              labels: {type: object, additionalProperties: {type: string}}` + rule + "\n"
}

func main() {
	objects := flag.String("objects", "10000", "Comma-separated object counts to measure, in increasing order (objects are added between counts).")
	rounds := flag.Int("rounds", 3, "Measurements of each kind per count; the median is reported.")
	policies := flag.Int("policies", 0, "Spread the objects over this many CRDs and propose a policy and binding for each besides the tightened CRDs (0: one CRD, tightened).")
	cpuProfile := flag.String("cpuprofile", "", "Write a CPU profile of one more whatif run, in process, at the last count, to this file.")
	whatifFlags := flag.String("whatif-flags", "", "More flags of each whatif run, space-separated (e.g. --kube-api-qps=5 --kube-api-burst=10: client-go's default limits).")
	flag.Parse()
	if err := run(*objects, *rounds, newFixture(*policies), strings.Fields(*whatifFlags), *cpuProfile); err != nil {
		fmt.Fprintln(os.Stderr, "whatif bench:", err)
		os.Exit(1)
	}
}

func run(objectCounts string, rounds int, fix fixture, whatifFlags []string, cpuProfile string) error {
	ctx := context.Background()
	b, stop, err := setUp(ctx, fix)
	if err != nil {
		return err
	}
	defer stop()
	args := append([]string{"whatif", "-f", b.proposal, "--kubeconfig", b.kubeconfig, "-o", "json"}, whatifFlags...)
	fmt.Printf("| objects | CRDs | policies | LIST, dynamic client (s) | LIST, listjson client (s) | whatif (s) | whatif / dynamic LIST | whatif / listjson LIST | whatif CPU (s) | whatif peak RSS (MiB) | failures listed |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|\n")
	policies := 0
	if fix.policies {
		policies = len(fix.kinds)
	}
	stored := 0
	for _, f := range strings.Split(objectCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("-objects: %w", err)
		}
		start := time.Now()
		if err := create(ctx, b.dyn, fix.kinds, stored, n); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "stored %d objects in %s\n", n-stored, time.Since(start).Round(time.Second))
		stored = n
		m, err := b.measure(ctx, fix.kinds, n, rounds, args)
		if err != nil {
			return err
		}
		d, j, w := median(m.dynamic), median(m.json), median(m.whatif)
		fmt.Printf("| %d | %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %d |\n", n, len(fix.kinds), policies, d, j, w, w/d, w/j, median(m.cpu), median(m.rss), m.failures)
	}
	if cpuProfile != "" {
		return profileWhatif(cpuProfile, args)
	}
	return nil
}

// bench is the control plane the benchmark runs on, with the CRDs stored, and what it runs.
type bench struct {
	// bin is the kubectl-celaudit binary; kubeconfig and proposal the files whatif reads.
	bin, kubeconfig, proposal string
	dyn                       dynamic.Interface
	lister                    scan.Client
}

// setUp builds kubectl-celaudit, starts a control plane and stores the fixture's CRDs and the namespaces; the
// function it returns stops the control plane and removes the files.
func setUp(ctx context.Context, fix fixture) (*bench, func(), error) {
	work, err := os.MkdirTemp("", "whatif-bench-")
	if err != nil {
		return nil, nil, err
	}
	b := &bench{bin: filepath.Join(work, "kubectl-celaudit"), kubeconfig: filepath.Join(work, "kubeconfig"), proposal: filepath.Join(work, "tightened.yaml")}
	build := exec.Command("go", "build", "-o", b.bin, "./cmd/kubectl-celaudit")
	build.Dir, build.Stdout, build.Stderr = envtestutil.RepoRoot(), os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		_ = os.RemoveAll(work)
		return nil, nil, fmt.Errorf("building kubectl-celaudit: %w", err)
	}
	env, err := envtestutil.Start()
	if err != nil {
		_ = os.RemoveAll(work)
		return nil, nil, err
	}
	stop := func() {
		_ = env.Stop()
		_ = os.RemoveAll(work)
	}
	if err := b.store(ctx, env, fix); err != nil {
		stop()
		return nil, nil, err
	}
	return b, stop, nil
}

// store writes the kubeconfig and the proposal, stores the fixture's CRDs as they are before the proposal and
// the namespaces, and makes the clients of the bare LISTs.
func (b *bench) store(ctx context.Context, env *envtestutil.Env, fix fixture) error {
	if err := os.WriteFile(b.kubeconfig, env.KubeConfig, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(b.proposal, []byte(fix.proposal()), 0o600); err != nil {
		return err
	}
	if err := apply(ctx, env.Client, fix.live()); err != nil {
		return err
	}
	for _, k := range fix.kinds {
		if err := envtestutil.WaitEstablished(ctx, env.Client, resourceOf(k).Resource+"."+group); err != nil {
			return err
		}
	}
	for i := range namespaces {
		if err := apply(ctx, env.Client, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: bench-%d}\n", i)); err != nil {
			return err
		}
	}
	var err error
	if b.dyn, err = dynamic.NewForConfig(env.Config); err != nil {
		return err
	}
	b.lister, err = scan.NewClient(env.Config, nil)
	return err
}

// measurements are one count's rounds: the seconds of each bare LIST and whatif run, whatif's CPU seconds and
// peak RSS, and the failures the last whatif run listed.
type measurements struct {
	dynamic, json, whatif, cpu, rss []float64
	failures                        int
}

// measure times, rounds times, a bare LIST of the n objects of kinds with each client and a whatif run with
// args.
func (b *bench) measure(ctx context.Context, kinds []string, n, rounds int, args []string) (measurements, error) {
	var m measurements
	for range rounds {
		t, err := timeIt(func() error { return listDynamic(ctx, b.dyn, kinds, n) })
		if err != nil {
			return m, err
		}
		m.dynamic = append(m.dynamic, t)
		if t, err = timeIt(func() error { return listJSON(ctx, b.lister, kinds, n) }); err != nil {
			return m, err
		}
		m.json = append(m.json, t)
		r, err := whatif(b.bin, args)
		if err != nil {
			return m, err
		}
		m.whatif, m.cpu, m.rss, m.failures = append(m.whatif, r.seconds), append(m.cpu, r.cpuSeconds), append(m.rss, r.rssMiB), r.failures
	}
	return m, nil
}

// profileWhatif writes a CPU profile of a whatif run in this process (the same code as the binary's).
func profileWhatif(path string, args []string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	var errOut strings.Builder
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: &errOut}
	code := cli.Run(streams, args)
	pprof.StopCPUProfile()
	if code != 1 {
		return fmt.Errorf("profiled whatif exited %d, want 1:\n%s", code, errOut.String())
	}
	fmt.Fprintf(os.Stderr, "wrote the CPU profile of a whatif run to %s\n", path)
	return nil
}

func apply(ctx context.Context, c client.Client, doc string) error {
	objs, err := envtestutil.DecodeYAML([]byte(doc))
	if err != nil {
		return err
	}
	return envtestutil.Apply(ctx, c, objs...)
}

// create stores objects from up to n: object i is of kind i % len(kinds), in namespace i % namespaces, and
// one in twenty has odd replicas.
func create(ctx context.Context, dyn dynamic.Interface, kinds []string, from, n int) error {
	next := atomic.Int64{}
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				replicas := int64(2 * (i % 5))
				if i%20 == 7 {
					replicas++
				}
				kind := kinds[i%len(kinds)]
				obj := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": group + "/v1", "kind": kind,
					"metadata": map[string]any{"name": fmt.Sprintf("thing-%06d", i), "namespace": fmt.Sprintf("bench-%d", i%namespaces)},
					"spec": map[string]any{"replicas": replicas, "owner": "team-" + strconv.Itoa(i%7), "image": "registry.example.com/app:1." + strconv.Itoa(i%13),
						"labels": map[string]any{"app": "thing", "tier": "backend"}},
				}}
				if _, err := dyn.Resource(resourceOf(kind)).Namespace(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func timeIt(f func() error) (float64, error) {
	runtime.GC()
	start := time.Now()
	err := f()
	return time.Since(start).Seconds(), err
}

// listDynamic reads every object of each kind in pages, decoded by client-go's dynamic client, as kubectl get
// does.
func listDynamic(ctx context.Context, dyn dynamic.Interface, kinds []string, want int) error {
	got := 0
	for _, k := range kinds {
		opts := metav1.ListOptions{Limit: pageSize}
		for {
			page, err := dyn.Resource(resourceOf(k)).List(ctx, opts)
			if err != nil {
				return err
			}
			got += len(page.Items)
			if opts.Continue = page.GetContinue(); opts.Continue == "" {
				break
			}
		}
	}
	if got != want {
		return fmt.Errorf("listed %d objects, want %d", got, want)
	}
	return nil
}

// listJSON reads every object of each kind in pages with the client whatif reads with, decoding each item.
func listJSON(ctx context.Context, c scan.Client, kinds []string, want int) error {
	got := 0
	for _, k := range kinds {
		opts := metav1.ListOptions{Limit: pageSize}
		for {
			page, err := c.List(ctx, resourceOf(k), "", opts)
			if err != nil {
				return err
			}
			for i := range page.Len() {
				if _, err := page.Item(i); err != nil {
					return err
				}
				got++
			}
			if opts.Continue = page.List.GetContinue(); opts.Continue == "" {
				break
			}
		}
	}
	if got != want {
		return fmt.Errorf("listed %d objects, want %d", got, want)
	}
	return nil
}

// whatifRun is what one whatif process took and listed.
type whatifRun struct {
	seconds, cpuSeconds, rssMiB float64
	failures                    int
}

// whatif runs the plugin with args and returns its wall time, CPU time (user and system), peak RSS in MiB and
// the number of failures it lists.
func whatif(bin string, args []string) (whatifRun, error) {
	cmd := exec.Command(bin, args...)
	out, errOut := &strings.Builder{}, &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, errOut
	start := time.Now()
	err := cmd.Run()
	var r whatifRun
	r.seconds = time.Since(start).Seconds()
	if code := cmd.ProcessState.ExitCode(); code != 1 { // the tightened rule newly rejects objects
		return r, fmt.Errorf("whatif exited %d, want 1: %w\n%s", code, err, errOut.String())
	}
	usage := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r.rssMiB = float64(usage.Maxrss) / 1024
	r.cpuSeconds = (time.Duration(usage.Utime.Nano()) + time.Duration(usage.Stime.Nano())).Seconds()
	r.failures = strings.Count(out.String(), `"result": "fail"`)
	return r, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
