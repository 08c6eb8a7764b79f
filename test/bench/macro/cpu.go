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

// controlPlanePIDs returns the processes run from the envtest binaries (the kube-apiserver and etcd
// serving the benchmark) that this process started, by pid, with their binary's name: other engineers' and
// other runs' control planes on the same machine run the same binaries.
func controlPlanePIDs() map[string]string {
	assets, err := filepath.EvalSymlinks(os.Getenv("KUBEBUILDER_ASSETS"))
	if err != nil || assets == "" {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := strconv.Itoa(os.Getpid())
	out := map[string]string{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || !strings.HasPrefix(exe, assets+string(filepath.Separator)) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
		rest := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(rest) < 2 || rest[1] != self {
			continue
		}
		out[e.Name()] = filepath.Base(exe)
	}
	return out
}

// controlPlaneCPU returns the CPU time used so far by the control plane this process started.
func controlPlaneCPU() time.Duration {
	var total time.Duration
	for pid := range controlPlanePIDs() {
		if d, err := procCPU(pid); err == nil {
			total += d
		}
	}
	return total
}

// controlPlaneMemory returns the resident and peak resident memory of the control plane's processes, by
// binary name (kube-apiserver, etcd).
func controlPlaneMemory() map[string]memory {
	out := map[string]memory{}
	for pid, name := range controlPlanePIDs() {
		m, err := readMemory(pid)
		if err != nil {
			continue
		}
		out[name] = m
	}
	return out
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
