package envtestutil

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// StartRestartableForTest starts a control plane of the test's own whose API server can be stopped and
// started again (see StopAPIServer): it keeps its certificates and service account signing key in a directory
// of the test's, so that clients made before a restart, and the tokens it issued, still work after it.
// flags are kube-apiserver flags, as name and value pairs.
func StartRestartableForTest(t testing.TB, flags ...[2]string) *Env {
	t.Helper()
	dir := t.TempDir()
	env, err := StartWith(func(te *envtest.Environment) {
		api := te.ControlPlane.GetAPIServer()
		api.CertDir = dir
		// A kube-apiserver asked to stop waits for its watches to end, up to its request timeout (a minute):
		// after a few seconds it is killed, as the kubelet kills a pod after its grace period.
		te.ControlPlaneStopTimeout = apiServerGracePeriod
		for _, f := range flags {
			api.Configure().Set(f[0], f[1])
		}
	})
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

// apiServerGracePeriod is how long a kube-apiserver asked to stop may take before it is killed.
const apiServerGracePeriod = 3 * time.Second

// StopAPIServer stops the kube-apiserver process (SIGTERM, then SIGKILL after a few seconds); etcd keeps
// running. Clients then fail to connect until StartAPIServer starts it again.
func (e *Env) StopAPIServer(t testing.TB) {
	t.Helper()
	err := e.ControlPlane.APIServer.Stop()
	if err != nil && !strings.Contains(err.Error(), "timeout waiting for process") {
		t.Fatalf("stopping the API server: %v", err)
	}
	// A killed process is not waited for: its port is free once it is gone.
	addr := e.ControlPlane.APIServer.HostPort() // the secure port, the only one served
	Eventually(t, 30*time.Second, func() error {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil //nolint:nilerr // refused: the API server is gone
		}
		_ = conn.Close()
		return fmt.Errorf("the API server still listens on %s", addr)
	})
}

// StartAPIServer starts the kube-apiserver stopped by StopAPIServer again, on the same port, with the same
// certificates and etcd, and waits until it is healthy.
func (e *Env) StartAPIServer(t testing.TB) {
	t.Helper()
	if err := e.ControlPlane.APIServer.Start(); err != nil {
		t.Fatalf("starting the API server again: %v", err)
	}
}

// CompactEtcd compacts etcd's history up to its current revision, as the API server does every five minutes:
// every resourceVersion and continue token issued until now expires (410 Gone). It returns the revision.
func (e *Env) CompactEtcd(ctx context.Context) (int64, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{e.ControlPlane.Etcd.URL.String()},
		DialTimeout: 10 * time.Second,
	})
	if err != nil {
		return 0, fmt.Errorf("connecting to etcd: %w", err)
	}
	defer func() { _ = c.Close() }()
	// A write moves the revision past the newest resourceVersion clients hold, so that it is compacted too.
	put, err := c.Put(ctx, "/celaudit-test/compact", time.Now().String())
	if err != nil {
		return 0, fmt.Errorf("writing to etcd: %w", err)
	}
	rev := put.Header.Revision
	if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("compacting etcd at revision %d: %w", rev, err)
	}
	return rev, nil
}
