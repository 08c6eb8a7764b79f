package envtestutil

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/celaudit/celaudit/controllers"
)

// RepoRoot returns the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Env is a running control plane.
type Env struct {
	*envtest.Environment
	Config *rest.Config
	Client client.Client
}

// Start starts kube-apiserver and etcd from KUBEBUILDER_ASSETS (see hack/setup-envtest.sh) and installs the
// report CRDs.
func Start() (*Env, error) {
	return StartWith(nil)
}

// StartWith is Start with the environment changed by configure, when set, before it starts.
func StartWith(configure func(*envtest.Environment)) (*Env, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run the tests with 'make test' (hack/setup-envtest.sh builds the control plane)")
	}
	te := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	if configure != nil {
		configure(te)
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("starting control plane: %w", err)
	}
	// Tests create many objects quickly; the default client rate limit would only slow them down.
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return &Env{Environment: te, Config: cfg, Client: c}, nil
}
