package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildOperator builds the celaudit binary as `make build` does.
func buildOperator(repo, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building celaudit: %w", err)
	}
	return nil
}

// buildProfiled builds celaudit with profiling hooks (test/bench/profiled).
func buildProfiled(repo, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./test/bench/profiled")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the profiling variant: %w", err)
	}
	return nil
}

// operator is a running celaudit process.
type operator struct {
	cmd     *exec.Cmd
	started time.Time
	probe   string
	log     *os.File

	mu        sync.Mutex
	maxRSS    int64 // largest sampled VmRSS, bytes
	samples   int
	stopWatch chan struct{}
	exited    chan error
}

// freePort returns a loopback port nobody listens on.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startOperator runs bin with kubeconfig, logging to logPath, and samples its memory every interval.
func startOperator(bin, kubeconfig, logPath string, extraArgs, extraEnv []string) (*operator, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("finding a probe port: %w", err)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	probe := fmt.Sprintf("127.0.0.1:%d", port)
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=" + probe,
	}, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), extraEnv...)
	o := &operator{cmd: cmd, probe: probe, log: logFile, stopWatch: make(chan struct{}), exited: make(chan error, 1)}
	o.started = time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() { o.exited <- cmd.Wait() }()
	go o.sample(100 * time.Millisecond)
	return o, nil
}

func (o *operator) sample(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-o.stopWatch:
			return
		case <-t.C:
			st, err := o.status()
			if err != nil {
				continue
			}
			o.mu.Lock()
			o.maxRSS = max(o.maxRSS, st["VmRSS"])
			o.samples++
			o.mu.Unlock()
		}
	}
}

// status reads the memory lines of /proc/<pid>/status, in bytes.
func (o *operator) status() (map[string]int64, error) {
	return procStatus(strconv.Itoa(o.cmd.Process.Pid))
}

// procStatus returns the Vm* fields of process pid's /proc status, in bytes.
func procStatus(pid string) (map[string]int64, error) {
	f, err := os.Open(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(k, "Vm") {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 2 && fields[1] == "kB" {
			n, _ := strconv.ParseInt(fields[0], 10, 64)
			out[k] = n * 1024
		}
	}
	return out, sc.Err()
}

// readMemory returns process pid's memory now.
func readMemory(pid string) (memory, error) {
	st, err := procStatus(pid)
	if err != nil {
		return memory{}, err
	}
	return memory{HWM: st["VmHWM"], RSS: st["VmRSS"], SampledMax: st["VmRSS"]}, nil
}

// memory is the operator's memory at one moment.
type memory struct {
	HWM        int64 // VmHWM: the kernel's peak resident set size
	RSS        int64 // VmRSS now
	SampledMax int64 // largest VmRSS seen by the 100 ms sampler
}

func (o *operator) memory() (memory, error) {
	st, err := o.status()
	if err != nil {
		return memory{}, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return memory{HWM: st["VmHWM"], RSS: st["VmRSS"], SampledMax: max(o.maxRSS, st["VmRSS"])}, nil
}

// cpu returns the CPU time (user + system) the operator used so far.
func (o *operator) cpu() (time.Duration, error) { return procCPU(strconv.Itoa(o.cmd.Process.Pid)) }

// ready reports whether the operator's readiness endpoint, which includes the first-audit check, passes.
func (o *operator) ready() bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + o.probe + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// readyPoller polls readiness every 100 ms and remembers the first time it passed.
func (o *operator) readyPoller(ctx context.Context, onReady func()) (ready func() bool, at func() time.Time) {
	var (
		mu    sync.Mutex
		first time.Time
	)
	go func() {
		for ctx.Err() == nil {
			if o.ready() {
				if onReady != nil {
					onReady() // before first is set: what it records is visible once ready reports true
				}
				mu.Lock()
				first = time.Now()
				mu.Unlock()
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return !first.IsZero()
		}, func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return first
		}
}

// running reports an early exit of the operator.
func (o *operator) running() error {
	select {
	case err := <-o.exited:
		o.exited <- err
		return fmt.Errorf("celaudit exited: %w (log: %s)", err, o.log.Name())
	default:
		return nil
	}
}

// stop ends the operator with SIGTERM (SIGKILL after 20 s).
func (o *operator) stop() {
	close(o.stopWatch)
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	// The exit status after a signal tells nothing: early exits are reported by running.
	var exitErr error
	select {
	case exitErr = <-o.exited:
	case <-time.After(20 * time.Second):
		_ = o.cmd.Process.Kill()
		exitErr = <-o.exited
	}
	_ = exitErr
	o.log.Close()
}
