package envtestutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Identity is the ServiceAccount celaudit runs as in an install, with a token for it.
type Identity struct {
	// Namespace and Name are the ServiceAccount's.
	Namespace, Name string
	// Config authenticates with the ServiceAccount's token only: no client certificate, no admin rights.
	Config *rest.Config
}

// Username is the name the API server knows the ServiceAccount by.
func (i Identity) Username() string {
	return "system:serviceaccount:" + i.Namespace + ":" + i.Name
}

// shippedKinds are the kinds of config/default (or of the rendered chart) an identity is made of; the
// Deployment, Service and CRDs are left out (the tests run the operator in-process and install the CRDs themselves).
var shippedKinds = map[string]bool{
	"Namespace": true, "ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
}

// ShippedIdentity applies the namespace, ServiceAccount, Roles, ClusterRoles and bindings of
// `kubectl kustomize config/default` to the control plane and returns a token-authenticated config for the
// ServiceAccount (TokenRequest API). An operator started with it has exactly the access an install grants.
func (e *Env) ShippedIdentity(t testing.TB) Identity {
	t.Helper()
	id, err := e.Install(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Install is ShippedIdentity for callers that are not tests, such as the demo.
func (e *Env) Install(ctx context.Context) (Identity, error) {
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	out, err := exec.CommandContext(ctx, kubectl, "kustomize", filepath.Join(RepoRoot(), "config", "default")).Output()
	if err != nil {
		return Identity{}, fmt.Errorf("kubectl kustomize config/default: %w", err)
	}
	objs, err := DecodeYAML(out)
	if err != nil {
		return Identity{}, fmt.Errorf("decoding config/default: %w", err)
	}
	return e.applyIdentity(ctx, objs, "config/default")
}

// applyIdentity applies the objects of the identity kinds among objs, taken from source, and returns a
// token-authenticated config for the one ServiceAccount among them.
func (e *Env) applyIdentity(ctx context.Context, objs []*unstructured.Unstructured, source string) (Identity, error) {
	var id Identity
	for _, o := range objs {
		if !shippedKinds[o.GetKind()] {
			continue
		}
		if o.GetKind() == "ServiceAccount" {
			id.Namespace, id.Name = o.GetNamespace(), o.GetName()
		}
		if err := Apply(ctx, e.Client, o); err != nil {
			return Identity{}, fmt.Errorf("applying the RBAC of %s: %w", source, err)
		}
	}
	if id.Name == "" {
		return Identity{}, fmt.Errorf("%s has no ServiceAccount", source)
	}
	sa := &corev1.ServiceAccount{}
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: id.Namespace, Name: id.Name}, sa); err != nil {
		return Identity{}, fmt.Errorf("getting ServiceAccount: %w", err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}
	if err := e.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return Identity{}, fmt.Errorf("requesting a token for %s: %w", id, err)
	}
	if tr.Status.Token == "" {
		return Identity{}, fmt.Errorf("the TokenRequest for %s returned no token", id)
	}
	id.Config = rest.AnonymousClientConfig(e.Config)
	id.Config.BearerToken = tr.Status.Token
	id.Config.QPS, id.Config.Burst = e.Config.QPS, e.Config.Burst
	return id, nil
}

// String names the identity in test messages.
func (i Identity) String() string { return fmt.Sprintf("ServiceAccount %s/%s", i.Namespace, i.Name) }
