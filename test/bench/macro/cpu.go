package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procCPU returns the CPU time (user + system) process pid used so far.
func procCPU(pid string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected stat %q", s)
	}
	fields := strings.Fields(s[i+1:])
	// After the command: state(0) ... utime(11) stime(12), in clock ticks (100 per second on Linux).
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected stat %q", s)
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond, nil
}

// controlPlaneCPU returns the CPU time used so far by the processes run from the envtest binaries (the
// kube-apiserver and etcd serving the benchmark).
func controlPlaneCPU() time.Duration {
	assets, err := filepath.EvalSymlinks(os.Getenv("KUBEBUILDER_ASSETS"))
	if err != nil || assets == "" {
		return 0
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || !strings.HasPrefix(exe, assets+string(filepath.Separator)) {
			continue
		}
		if d, err := procCPU(e.Name()); err == nil {
			total += d
		}
	}
	return total
}

// selfCPU returns the CPU time the harness itself used so far.
func selfCPU() time.Duration {
	d, _ := procCPU("self")
	return d
}

// cpuMeter measures the CPU time the control plane and the harness use between start and stop.
type cpuMeter struct{ cp, self time.Duration }

func startCPU() cpuMeter { return cpuMeter{cp: controlPlaneCPU(), self: selfCPU()} }

func (m cpuMeter) stop() (controlPlane, harness float64) {
	return (controlPlaneCPU() - m.cp).Seconds(), (selfCPU() - m.self).Seconds()
}
