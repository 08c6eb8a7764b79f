// Command discovery-snapshot writes the discovery of a kube-apiserver that serves only its built-in APIs
// (the envtest control plane from KUBEBUILDER_ASSETS, without CRDs) as the JSON internal/views embeds.
//
// Usage: KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh) go run ./hack/discovery-snapshot [-o file]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/celaudit/celaudit/internal/views"
)

func main() {
	out := flag.String("o", "internal/views/builtin_discovery.json", "File to write the snapshot to.")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "discovery-snapshot:", err)
		os.Exit(1)
	}
}

func run(out string) (err error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set: run 'make discovery-snapshot'")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting control plane: %w", err)
	}
	defer func() {
		if serr := env.Stop(); serr != nil && err == nil {
			err = fmt.Errorf("stopping control plane: %w", serr)
		}
	}()
	client, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating discovery client: %w", err)
	}
	version, err := client.ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the server version: %w", err)
	}
	// Every group must answer: a snapshot with a group left out would report its resources as not served.
	groups, lists, err := discovery.ServerGroupsAndResources(client)
	if err != nil {
		return fmt.Errorf("reading discovery: %w", err)
	}
	data, err := json.MarshalIndent(views.DiscoverySnapshot{ServerVersion: version.GitVersion, Groups: groups, Resources: inGroupOrder(groups, lists)}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the snapshot: %w", err)
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the snapshot: %w", err)
	}
	fmt.Printf("Wrote the discovery of kube-apiserver %s (%d groups, %d group versions) to %s\n", version.GitVersion, len(groups), len(lists), out)
	return nil
}

// inGroupOrder returns lists in the order of groups and of their versions, for a stable file: client-go
// returns aggregated discovery's resource lists in map order.
func inGroupOrder(groups []*metav1.APIGroup, lists []*metav1.APIResourceList) []*metav1.APIResourceList {
	byGV := map[string]*metav1.APIResourceList{}
	for _, l := range lists {
		byGV[l.GroupVersion] = l
	}
	out := make([]*metav1.APIResourceList, 0, len(lists))
	for _, g := range groups {
		for _, v := range g.Versions {
			if l := byGV[v.GroupVersion]; l != nil {
				out = append(out, l)
				delete(byGV, v.GroupVersion)
			}
		}
	}
	for _, l := range lists { // a list of no group's version, which discovery does not return
		if byGV[l.GroupVersion] != nil {
			out = append(out, l)
		}
	}
	return out
}
