package views

import (
	_ "embed"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DiscoverySnapshot is what an API server's discovery serves, as client-go's ServerGroupsAndResources
// returns it: the groups in the server's order, each listing its preferred version first, and the resource
// lists of their versions in the same order.
type DiscoverySnapshot struct {
	// ServerVersion is the gitVersion of the API server the snapshot was taken from.
	ServerVersion string                    `json:"serverVersion"`
	Groups        []*metav1.APIGroup        `json:"groups"`
	Resources     []*metav1.APIResourceList `json:"resources"`
}

// builtinDiscoveryJSON is the discovery of a kube-apiserver without CRDs or aggregated APIs, taken by
// hack/discovery-snapshot (make discovery-snapshot).
//
//go:embed builtin_discovery.json
var builtinDiscoveryJSON []byte

// BuiltinDiscovery returns the discovery of the resources kube-apiserver serves itself, with its default
// set of enabled APIs. Each call returns a new copy.
func BuiltinDiscovery() (DiscoverySnapshot, error) {
	var s DiscoverySnapshot
	if err := json.Unmarshal(builtinDiscoveryJSON, &s); err != nil {
		return DiscoverySnapshot{}, fmt.Errorf("decoding the built-in discovery snapshot: %w", err)
	}
	return s, nil
}
