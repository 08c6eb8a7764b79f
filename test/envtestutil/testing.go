package envtestutil

import (
	"os"
	"path/filepath"
	"testing"
)

// StartForTest starts a control plane of the test's own (see Start), stopped when the test ends.
func StartForTest(t testing.TB) *Env {
	t.Helper()
	env, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stopping the control plane: %v", err)
		}
	})
	return env
}

// KubeconfigFile writes a kubeconfig for the control plane in the test's temporary directory and returns its
// path, for commands that take --kubeconfig.
func (e *Env) KubeconfigFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, e.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
