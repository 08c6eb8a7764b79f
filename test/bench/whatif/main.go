// Command whatif measures `kubectl celaudit whatif` of a tightened CRD against a bare paginated LIST of the
// same resource, on a real control plane (kube-apiserver and etcd from KUBEBUILDER_ASSETS). It stores N
// custom resources (one in twenty breaks the rule the proposal adds), then alternates, -rounds times: a bare
// LIST of every object in pages of 500 (client-go's dynamic client, as kubectl get does, and the listjson
// client whatif itself reads with) and a whatif run of the kubectl-celaudit binary in a process of its own,
// whose wall time and peak RSS are recorded. It prints a markdown table of the medians.
//
//	KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh) go run ./test/bench/whatif -objects 10000,30000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/test/envtestutil"
)

const (
	group      = "whatif.bench.celaudit.io"
	namespaces = 10
	pageSize   = 500
)

var things = schema.GroupVersionResource{Group: group, Version: "v1", Resource: "things"}

// crd returns the Thing CRD: owner at most 16 bytes; tightened, replicas must also be even.
func crd(tightened bool) string {
	rule := ""
	if tightened {
		rule = `
            x-kubernetes-validations:
            - rule: "self.replicas % 2 == 0"
              message: replicas must be even`
	}
	return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.` + group + `}
spec:
  group: ` + group + `
  names: {kind: Thing, listKind: ThingList, plural: things, singular: thing}
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
	flag.Parse()
	if err := run(*objects, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "whatif bench:", err)
		os.Exit(1)
	}
}

func run(objectCounts string, rounds int) error {
	ctx := context.Background()
	work, err := os.MkdirTemp("", "whatif-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "kubectl-celaudit")
	build := exec.Command("go", "build", "-o", bin, "./cmd/kubectl-celaudit")
	build.Dir, build.Stdout, build.Stderr = envtestutil.RepoRoot(), os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building kubectl-celaudit: %w", err)
	}
	env, err := envtestutil.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	kubeconfig := filepath.Join(work, "kubeconfig")
	proposal := filepath.Join(work, "tightened.yaml")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(proposal, []byte(crd(true)), 0o600); err != nil {
		return err
	}
	if err := apply(ctx, env.Client, crd(false)); err != nil {
		return err
	}
	for i := range namespaces {
		if err := apply(ctx, env.Client, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: bench-%d}\n", i)); err != nil {
			return err
		}
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	lister, err := scan.NewClient(env.Config, nil)
	if err != nil {
		return err
	}

	fmt.Printf("| objects | LIST, dynamic client (s) | LIST, listjson client (s) | whatif (s) | whatif / dynamic LIST | whatif / listjson LIST | whatif peak RSS (MiB) | failures listed |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|\n")
	stored := 0
	for _, f := range strings.Split(objectCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("-objects: %w", err)
		}
		start := time.Now()
		if err := create(ctx, dyn, stored, n); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "stored %d objects in %s\n", n-stored, time.Since(start).Round(time.Second))
		stored = n
		var dynTimes, jsonTimes, whatifTimes, rss []float64
		failures := 0
		for range rounds {
			t, err := timeIt(func() error { return listDynamic(ctx, dyn, n) })
			if err != nil {
				return err
			}
			dynTimes = append(dynTimes, t)
			if t, err = timeIt(func() error { return listJSON(ctx, lister, n) }); err != nil {
				return err
			}
			jsonTimes = append(jsonTimes, t)
			t, maxRSS, listed, err := whatif(bin, kubeconfig, proposal)
			if err != nil {
				return err
			}
			whatifTimes, rss, failures = append(whatifTimes, t), append(rss, maxRSS), listed
		}
		d, j, w := median(dynTimes), median(jsonTimes), median(whatifTimes)
		fmt.Printf("| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %d |\n", n, d, j, w, w/d, w/j, median(rss), failures)
	}
	return nil
}

func apply(ctx context.Context, c client.Client, doc string) error {
	objs, err := envtestutil.DecodeYAML([]byte(doc))
	if err != nil {
		return err
	}
	return envtestutil.Apply(ctx, c, objs...)
}

// create stores objects from up to n: object i is in namespace i % namespaces, and one in twenty has odd
// replicas.
func create(ctx context.Context, dyn dynamic.Interface, from, n int) error {
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
				obj := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": group + "/v1", "kind": "Thing",
					"metadata": map[string]any{"name": fmt.Sprintf("thing-%06d", i), "namespace": fmt.Sprintf("bench-%d", i%namespaces)},
					"spec": map[string]any{"replicas": replicas, "owner": "team-" + strconv.Itoa(i%7), "image": "registry.example.com/app:1." + strconv.Itoa(i%13),
						"labels": map[string]any{"app": "thing", "tier": "backend"}},
				}}
				if _, err := dyn.Resource(things).Namespace(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
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

// listDynamic reads every object in pages, decoded by client-go's dynamic client, as kubectl get does.
func listDynamic(ctx context.Context, dyn dynamic.Interface, want int) error {
	opts := metav1.ListOptions{Limit: pageSize}
	got := 0
	for {
		page, err := dyn.Resource(things).List(ctx, opts)
		if err != nil {
			return err
		}
		got += len(page.Items)
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			break
		}
	}
	if got != want {
		return fmt.Errorf("listed %d objects, want %d", got, want)
	}
	return nil
}

// listJSON reads every object in pages with the client whatif reads with, decoding each item.
func listJSON(ctx context.Context, c scan.Client, want int) error {
	opts := metav1.ListOptions{Limit: pageSize}
	got := 0
	for {
		page, err := c.List(ctx, things, "", opts)
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
	if got != want {
		return fmt.Errorf("listed %d objects, want %d", got, want)
	}
	return nil
}

// whatif runs the plugin and returns its wall time, peak RSS in MiB and the number of failures it lists.
func whatif(bin, kubeconfig, proposal string) (seconds, rssMiB float64, failures int, err error) {
	cmd := exec.Command(bin, "whatif", "-f", proposal, "--kubeconfig", kubeconfig, "-o", "json")
	out, errOut := &strings.Builder{}, &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, errOut
	start := time.Now()
	err = cmd.Run()
	seconds = time.Since(start).Seconds()
	if code := cmd.ProcessState.ExitCode(); code != 1 { // the tightened rule newly rejects objects
		return 0, 0, 0, fmt.Errorf("whatif exited %d, want 1: %w\n%s", code, err, errOut.String())
	}
	rssMiB = float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024
	failures = strings.Count(out.String(), `"result": "fail"`)
	return seconds, rssMiB, failures, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
