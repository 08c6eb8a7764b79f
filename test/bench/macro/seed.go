package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Seed describes an etcd data directory that holds the CRDs without rules, the namespaces, the params and
// the objects of one plan (-objects, -namespaces): what store writes before the rules and policies. Creating
// a million objects takes most of an hour on a small machine, so a seed is created once and every run starts
// on a copy of it (a copy, because a run updates objects and a policy).
type Seed struct {
	Objects       int
	Namespaces    int
	Concurrency   int
	CreateSeconds float64
	Created       time.Time
	// LoadAverage at the start and at the end of the creation: the machine is shared.
	LoadStart, LoadEnd string
	// DataBytes is the size of the etcd data directory (db and WAL) once created.
	DataBytes int64
	// ControlPlane is the kube-apiserver's and etcd's memory once the objects are created (VmHWM: the
	// peak while creating).
	ControlPlane map[string]memory
}

const (
	seedFile    = "seed.json"
	seedDataDir = "etcd"
)

// seedDataPath is the etcd data directory of the seed in dir.
func seedDataPath(dir string) string { return filepath.Join(dir, seedDataDir) }

// loadSeed reads the seed in dir; ok is false when there is none (or an unfinished one).
func loadSeed(dir string) (Seed, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, seedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Seed{}, false, nil
	}
	if err != nil {
		return Seed{}, false, err
	}
	var s Seed
	if err := json.Unmarshal(b, &s); err != nil {
		return Seed{}, false, fmt.Errorf("reading %s: %w", filepath.Join(dir, seedFile), err)
	}
	return s, true, nil
}

// ensureSeed returns the seed in c.etcdSeed for n objects, creating it first when there is none. A seed of
// another plan is an error: the directory is never overwritten.
func ensureSeed(ctx context.Context, c config, n int) (Seed, error) {
	dir := c.etcdSeed
	s, ok, err := loadSeed(dir)
	if err != nil {
		return Seed{}, err
	}
	if ok {
		if s.Objects != n || s.Namespaces != c.namespaces {
			return Seed{}, fmt.Errorf("%s holds %d objects in %d namespaces, not %d in %d: use another -etcd-seed directory", dir, s.Objects, s.Namespaces, n, c.namespaces)
		}
		logf("reusing the seed in %s: %d objects in %d namespaces, created %s in %.0f s", dir, s.Objects, s.Namespaces, s.Created.Format(time.RFC3339), s.CreateSeconds)
		return s, nil
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return Seed{}, fmt.Errorf("%s is not empty and holds no %s (an interrupted creation?): remove it or use another directory", dir, seedFile)
	}
	logf("creating the seed in %s: %d objects in %d namespaces", dir, n, c.namespaces)
	s = Seed{Objects: n, Namespaces: c.namespaces, Concurrency: c.concurrency, Created: time.Now().UTC(), LoadStart: loadAverage()}
	// No audit log while creating: only the operator's requests are audited, and it is not running.
	env, _, err := startEnv(envOptions{dir: filepath.Join(dir, "apiserver"), etcdData: seedDataPath(dir), quota: c.quotaBackendBytes})
	if err != nil {
		return Seed{}, err
	}
	cl := &cluster{env: env}
	if err := cl.connect(filepath.Join(dir, "kubeconfig")); err != nil {
		cl.stop()
		return Seed{}, err
	}
	if err := setupCluster(ctx, cl.client, c.namespaces); err != nil {
		cl.stop()
		return Seed{}, err
	}
	logf("creating %d objects with %d goroutines", n, c.concurrency)
	took, err := createAll(ctx, cl.client, plan(n, c.namespaces), c.concurrency)
	s.ControlPlane = controlPlaneMemory()
	cl.stop()
	if err != nil {
		return Seed{}, err
	}
	s.CreateSeconds, s.LoadEnd = took.Seconds(), loadAverage()
	logf("created %d objects in %s (%.0f/s)", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	if s.DataBytes, err = dirBytes(seedDataPath(dir)); err != nil {
		return Seed{}, err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return Seed{}, err
	}
	return s, os.WriteFile(filepath.Join(dir, seedFile), b, 0o644)
}

// copySeed copies the seed's etcd data directory to dst, which must not exist.
func copySeed(dir, dst string) error {
	if _, err := os.Stat(dst); err == nil {
		return fmt.Errorf("%s exists: use a new -workdir", dst)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	start := time.Now()
	// cp keeps etcd's file modes and uses a reflink where the file system has them.
	out, err := exec.Command("cp", "-a", "--reflink=auto", seedDataPath(dir), dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copying %s to %s: %w: %s", seedDataPath(dir), dst, err, strings.TrimSpace(string(out)))
	}
	logf("copied the seed's etcd data to %s in %s", dst, time.Since(start).Round(time.Millisecond))
	return nil
}

// dirBytes sums the sizes of the regular files under dir.
func dirBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}

// loadAverage returns the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
