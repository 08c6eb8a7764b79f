package faults_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// buildOperator builds the celaudit binary into a temporary directory and returns its path.
func buildOperator(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "celaudit")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = envtestutil.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building celaudit: %v\n%s", err, out)
	}
	return bin
}

// process is a celaudit binary running against the control plane.
type process struct {
	cmd *exec.Cmd
	// lines receives each line the process logs; closed when its output ends.
	lines chan string
	// exited is closed once the process is gone.
	exited chan struct{}
}

// startProcess runs bin as the identity of kubeconfig, with the scenario's settings, writing one namespace's
// reports at a time and logging what it writes.
func startProcess(t *testing.T, bin, kubeconfig string) *process {
	t.Helper()
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--page-size=5", "--report-results=fail,warn,error", "--report-workers=1", "--zap-log-level=debug")
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = os.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting celaudit: %v", err)
	}
	p := &process{cmd: cmd, lines: make(chan string, 1024), exited: make(chan struct{})}
	go func() {
		s := bufio.NewScanner(out)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			select {
			case p.lines <- s.Text():
			default: // nobody is waiting for lines: they are dropped
			}
		}
		_, _ = io.Copy(io.Discard, out)
		close(p.lines)
		_ = cmd.Wait() // killed or stopped by the test: its status says nothing
		close(p.exited)
	}()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// waitLine waits until the process logs a line that contains s.
func (p *process) waitLine(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("celaudit ended before it logged %q", s)
			}
			if strings.Contains(l, s) {
				return
			}
		case <-timeout:
			t.Fatalf("celaudit did not log %q within 2m", s)
		}
	}
}

// kill ends the process with SIGKILL, as the kubelet does after a failed liveness probe or an OOM, and
// waits until it is gone.
func (p *process) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop ends the process with SIGTERM, as a rollout does, and waits until it is gone.
func (p *process) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatal("celaudit did not stop within a minute of SIGTERM")
	}
}

// TestOperatorKilledDuringFirstAudit runs the celaudit binary as its shipped ServiceAccount, kills it with
// SIGKILL once it has written the reports of one namespace of several, changes that namespace's objects and
// starts it again. The new process takes over the reports the killed one wrote and brings the stale one up
// to date: no report or result is duplicated or lost, and the reports equal a fresh audit.
func TestOperatorKilledDuringFirstAudit(t *testing.T) {
	bin := buildOperator(t)
	env := envtestutil.StartRestartableForTest(t)
	id := env.ShippedIdentity(t)
	var namespaces []string
	for i := range 6 {
		namespaces = append(namespaces, fmt.Sprintf("killed-%d", i))
	}
	c := cluster{namespaces: namespaces, perNS: 9}
	c.create(t, env.Client)
	kubeconfig := id.KubeconfigFile(t)

	first := startProcess(t, bin, kubeconfig)
	first.waitLine(t, "Reports written")
	first.kill(t)
	ctx := context.Background()
	var reports v1alpha2.PolicyReportList
	if err := env.Client.List(ctx, &reports); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed with the reports of %d namespaces of %d written", len(reports.Items), len(namespaces))
	if len(reports.Items) == 0 {
		t.Fatal("no report was left by the killed process")
	}
	// A namespace the killed process wrote changes before the new one starts: its report is stale.
	changeConfigMaps(t, env, reports.Items[0].Namespace)

	second := startProcess(t, bin, kubeconfig)
	waitFailures(t, env, c.namespaces, c.failures()+1)
	// One report per namespace: 3 results each, far below a chunk.
	envtestutil.Eventually(t, time.Minute, func() error {
		var reports v1alpha2.PolicyReportList
		if err := env.Client.List(ctx, &reports); err != nil {
			return err
		}
		per := map[string]int{}
		for _, r := range reports.Items {
			per[r.Namespace]++
		}
		for _, ns := range namespaces {
			if per[ns] != 1 {
				return fmt.Errorf("namespace %s has %d reports, want 1", ns, per[ns])
			}
		}
		return nil
	})
	second.stop(t)
	envtestutil.AssertFreshAuditAgrees(t, env.Client, id.Config, options(), c.namespaces...)
}
