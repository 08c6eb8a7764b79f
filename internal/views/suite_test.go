package views_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/celaudit/celaudit/test/envtestutil"
)

// The control plane the envtest tests of this package share, started by the first of them: the in-memory
// tests run without one.
var (
	envOnce sync.Once
	env     *envtestutil.Env
	envErr  error
)

// testEnv returns the shared control plane, starting it on first use.
func testEnv(t *testing.T) *envtestutil.Env {
	t.Helper()
	envOnce.Do(func() { env, envErr = envtestutil.Start() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	return env
}

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping control plane:", err)
		}
	}
	os.Exit(code)
}
