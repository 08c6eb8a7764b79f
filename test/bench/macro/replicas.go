package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// shardAnnotation is the annotation of a report written in sharded mode: "index/count".
const shardAnnotation = "celaudit.io/shard"

// auditShardsGVR are the members' published summaries (sharded mode only), removed between rounds.
var auditShardsGVR = schema.GroupVersionResource{Group: "audit.celaudit.io", Version: "v1alpha1", Resource: "auditshards"}

// operatorNamespace is the namespace the members run "in" (POD_NAMESPACE): their lease and AuditShards.
const operatorNamespace = "default"

// ReplicaRun is a -replicas run: the same objects audited by 1, 2, 3… operator processes (static
// --shard-index/--shard-count), with the API server's ShardedListAndWatch gate on and off.
type ReplicaRun struct {
	Command    string
	Code       string
	Machine    Machine
	Objects    int
	Namespaces int
	Seed       *Seed `json:",omitempty"`
	Expected   counts
	Rounds     []ReplicaRound
	Errors     []string
}

// ReplicaRound is one replica count under one gate setting.
type ReplicaRound struct {
	Gate     bool
	Replicas int
	// SettleSeconds: from the members' start to the last report event before 3 s of quiet, with the
	// summed summaries equal to the model.
	SettleSeconds float64
	Matched       bool
	Summaries     counts
	// SameAsSingle: every namespace's summary and listed results equal those of the single replica under
	// the same gate (nil for the single replica itself); Differences shows the first few that are not.
	SameAsSingle *bool `json:",omitempty"`
	Differences  []string
	// Requests are the members' requests in the round (all members share one user), from the audit log.
	Lists, Watches, ReportWrites int
	// ShardedLists are the LISTs that carried a shardSelector.
	ShardedLists            int
	ControlPlaneCPUSeconds  float64
	Members                 []MemberResult
	ReportsByShard          map[string]int
	ControlPlaneMemoryAfter map[string]memory `json:",omitempty"`
}

// MemberResult is one operator process of a round.
type MemberResult struct {
	Index int
	// ReadySeconds: from its start until its readiness passed; 0 if it never did.
	ReadySeconds float64
	// LastReportSeconds: from its start to the last event of a report carrying its shard annotation
	// (any report with one member): when its share of the first audit was written.
	LastReportSeconds float64
	CPUSeconds        float64
	HWM               int64
	// ReadBytes is the process's rchar (bytes read through read(2) and friends: its network input, the
	// API server's responses, and little else).
	ReadBytes int64
}

// measureReplicas runs the rounds of c.replicas under each gate setting of c.gates.
func measureReplicas(c config) error {
	ctx, cancel := signalContext()
	defer cancel()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set: set it to $(hack/setup-envtest.sh)")
	}
	counts, err := parseInts(c.replicas)
	if err != nil {
		return fmt.Errorf("-replicas: %w", err)
	}
	if reportAPI(c) != "wgpolicy" {
		return fmt.Errorf("-replicas measures the wgpolicy reports only")
	}
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	if c.workdir == "" {
		if c.workdir, err = os.MkdirTemp("", "celaudit-replicas-"); err != nil {
			return err
		}
	}
	if c.bin == "" {
		c.bin = filepath.Join(repo, "bin", "celaudit")
	}
	run := &ReplicaRun{Command: "go run ./test/bench/macro " + strings.Join(os.Args[1:], " "), Code: codeVersion(repo),
		Machine: machineInfo(), Objects: c.objects, Namespaces: c.namespaces}
	if err := build(c, repo, run.Code); err != nil {
		return err
	}
	var runErr error
	for _, g := range strings.Split(c.gates, ",") {
		gate, err := strconv.ParseBool(strings.TrimSpace(map[string]string{"on": "true", "off": "false"}[g]))
		if err != nil {
			return fmt.Errorf("-gates: %q is neither on nor off", g)
		}
		if runErr = replicaRounds(ctx, c, run, gate, counts); runErr != nil {
			run.Errors = append(run.Errors, runErr.Error())
			break
		}
	}
	if c.jsonOut != "" {
		b, err := json.MarshalIndent(run, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	w, closeOut, err := openOutput(c.out)
	if err != nil {
		return err
	}
	defer closeOut()
	replicasMarkdown(printer(func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }), run)
	return runErr
}

// replicaRounds starts one control plane with the gate set and runs each replica count over it.
func replicaRounds(ctx context.Context, c config, run *ReplicaRun, gate bool, counts []int) error {
	c.workdir = filepath.Join(c.workdir, fmt.Sprintf("gate-%v", gate))
	c.apiFeatureGates = fmt.Sprintf("ShardedListAndWatch=%v", gate)
	res := &Result{}
	logf("replicas: control plane with %s", c.apiFeatureGates)
	cl, err := prepare(ctx, c, c.objects, res)
	if err != nil {
		return err
	}
	defer cl.stop()
	run.Seed = res.Seed
	run.Expected, _ = cl.model.expected(cl.objects)
	var single map[string]string
	for _, k := range counts {
		round, fp, err := replicaRound(ctx, c, cl, run.Expected, gate, k)
		if round != nil {
			if single == nil && k == 1 {
				single = fp
			} else if single != nil {
				diffs := fingerprintDiff(single, fp, 5)
				same := len(diffs) == 0
				round.SameAsSingle, round.Differences = &same, diffs
			}
			run.Rounds = append(run.Rounds, *round)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// replicaRound runs k members until the reports settle, measures them, stops them and removes the reports.
func replicaRound(ctx context.Context, c config, cl *cluster, want counts, gate bool, k int) (*ReplicaRound, map[string]string, error) {
	logf("replicas: %d member(s), ShardedListAndWatch=%v", k, gate)
	round := &ReplicaRound{Gate: gate, Replicas: k}
	start := time.Now()
	meter := startCPU()
	members, readyAt, err := startMembers(ctx, c, cl, k)
	defer func() {
		for _, op := range members {
			op.stop()
		}
	}()
	if err != nil {
		return nil, nil, err
	}
	allRunning := func() bool {
		for _, op := range members {
			if op.running() != nil {
				return false
			}
		}
		return true
	}
	last, got, matched := cl.reports.waitSettled(ctx, allRunning, want, 3*time.Second, c.auditTimeout)
	round.SettleSeconds, round.Summaries, round.Matched = last.Sub(start).Seconds(), got, matched
	round.ControlPlaneCPUSeconds, _ = meter.stop()
	if err := measureMembers(cl, round, members, readyAt); err != nil {
		return round, nil, err
	}
	round.ControlPlaneMemoryAfter = controlPlaneMemory()
	fp, byShard := cl.reports.fingerprint()
	round.ReportsByShard = byShard
	phase := fmt.Sprintf("replicas-%v-%d", gate, k)
	cl.windows = append(cl.windows, window{Phase: phase, Start: start, End: time.Now()})
	logf("replicas %d, gate %v: settled after %.2fs, match %v (%+v)", k, gate, round.SettleSeconds, matched, got)
	if !matched {
		return round, fp, fmt.Errorf("%d members, gate %v: the reports never reflected every object: %+v, want %+v", k, gate, got, want)
	}
	for _, op := range members {
		op.stop()
	}
	members = nil
	time.Sleep(time.Second) // let the API server write the last audit events
	if reqs, err := operatorRequests(cl.auditLog, []window{{Phase: phase, Start: start, End: time.Now()}}); err == nil {
		r := reqs[phase]
		round.Lists, round.Watches = r.sum([]string{"LIST"}, nil), r.sum([]string{"WATCH"}, nil)
		round.ReportWrites = r.sum(writeVerbs, isReport)
	}
	round.ShardedLists = countShardedLists(cl.auditLog, start)
	return round, fp, clearReports(ctx, cl)
}

// startMembers starts k operator processes, the i-th with --shard-index i --shard-count k (no shard flags
// for one), and returns them with their readiness times.
func startMembers(ctx context.Context, c config, cl *cluster, k int) ([]*operator, []func() time.Time, error) {
	members := make([]*operator, 0, k)
	readyAt := make([]func() time.Time, 0, k)
	for i := range k {
		args := append(operatorArgs(c), "--leader-elect=true", "--leader-election-namespace="+operatorNamespace)
		if k > 1 {
			args = append(args, fmt.Sprintf("--shard-index=%d", i), fmt.Sprintf("--shard-count=%d", k))
		}
		env := append(strings.Fields(c.operatorEnv), fmt.Sprintf("POD_NAME=celaudit-%d", i), "POD_NAMESPACE="+operatorNamespace)
		op, err := startOperator(c.bin, cl.kubeconfig, filepath.Join(c.workdir, fmt.Sprintf("operator-%d-of-%d.log", i, k)), args, env)
		if err != nil {
			return members, readyAt, err
		}
		members = append(members, op)
		_, at := op.readyPoller(ctx, nil)
		readyAt = append(readyAt, at)
	}
	return members, readyAt, nil
}

// measureMembers records each member's readiness, CPU, memory, bytes read and last own report event.
func measureMembers(cl *cluster, round *ReplicaRound, members []*operator, readyAt []func() time.Time) error {
	k := len(members)
	for i, op := range members {
		if err := op.running(); err != nil {
			return err
		}
		m := MemberResult{Index: i}
		if at := readyAt[i](); !at.IsZero() {
			m.ReadySeconds = at.Sub(op.started).Seconds()
		}
		if cpu, err := op.cpu(); err == nil {
			m.CPUSeconds = cpu.Seconds()
		}
		if mem, err := op.memory(); err == nil {
			m.HWM = mem.HWM
		}
		m.ReadBytes = readBytes(op)
		shard := ""
		if k > 1 {
			shard = fmt.Sprintf("%d/%d", i, k)
		}
		cl.reports.mu.Lock()
		if at, ok := cl.reports.lastByShard[shard]; ok && at.After(op.started) {
			m.LastReportSeconds = at.Sub(op.started).Seconds()
		}
		cl.reports.mu.Unlock()
		round.Members = append(round.Members, m)
	}
	return nil
}

// readBytes returns the process's rchar from /proc/<pid>/io; -1 if unreadable.
func readBytes(op *operator) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(op.cmd.Process.Pid), "io"))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return -1
}

// countShardedLists counts the operator's LISTs since start whose request carried a shardSelector.
func countShardedLists(logPath string, start time.Time) int {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "shardSelector") {
			continue
		}
		var e auditEvent
		if json.Unmarshal([]byte(line), &e) != nil || e.Verb != "list" || e.User.Username != operatorUser || e.RequestReceivedTimestamp.Before(start) {
			continue
		}
		n++
	}
	return n
}

// clearReports deletes every report and AuditShard, so that the next round's first audit starts from none,
// and waits until the harness's watch has seen them go.
func clearReports(ctx context.Context, cl *cluster) error {
	cl.reports.mu.Lock()
	var refs []*reportState
	for _, st := range cl.reports.byName {
		refs = append(refs, st)
	}
	cl.reports.mu.Unlock()
	for _, st := range refs {
		err := cl.dyn.Resource(st.gvr).Namespace(st.namespace).Delete(ctx, st.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting report %s/%s: %w", st.namespace, st.name, err)
		}
	}
	err := cl.dyn.Resource(auditShardsGVR).Namespace(operatorNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !strings.Contains(err.Error(), "the server could not find the requested resource") {
		return fmt.Errorf("deleting AuditShards: %w", err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		n, _, _ := cl.reports.size()
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d reports left after deleting them all", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fingerprint returns every namespace's summed summary and every listed result, keyed by namespace, and
// the number of reports by their shard annotation.
func (r *reports) fingerprint() (map[string]string, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fp := map[string]string{}
	byShard := map[string]int{}
	sums := map[string]counts{}
	for _, st := range r.byName {
		if !st.counted {
			continue
		}
		shard := st.shard
		if shard == "" {
			shard = "unsharded"
		}
		byShard[shard]++
		s := sums[st.namespace]
		s.add(st.summary)
		sums[st.namespace] = s
		for k, v := range st.listed {
			fp[fmt.Sprintf("%s %s %s/%s", st.namespace, k.policy, k.kind, k.name)] = v
		}
	}
	for ns, s := range sums {
		fp[ns+" summary"] = fmt.Sprintf("%+v", s)
	}
	return fp, byShard
}

// fingerprintDiff returns up to limit differences between want and got.
func fingerprintDiff(want, got map[string]string, limit int) []string {
	var out []string
	keys := make([]string, 0, len(want)+len(got))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if want[k] != got[k] {
			if len(out) == limit {
				out = append(out, "…")
				break
			}
			out = append(out, fmt.Sprintf("%s: %q, single replica %q", k, got[k], want[k]))
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	if !slices.Contains(out, 1) || out[0] != 1 {
		return nil, fmt.Errorf("the first count must be 1: the others are compared with it")
	}
	return out, nil
}

// replicasMarkdown writes the replica table.
func replicasMarkdown(p printer, r *ReplicaRun) {
	p("### 1, 2 and 3 replicas over the same %s objects", thousands(r.Objects))
	p("")
	p("`%s` — %s; operator built from %s; %d CPUs (`nproc`), %s, %s; load average at start %s (other builds share the machine).",
		r.Command, r.Machine.Date, r.Code, r.Machine.NProc, r.Machine.MemTotal, r.Machine.CPUModel, r.Machine.LoadAvg)
	p("")
	p("One envtest API server (kube-apiserver with `--feature-gates=ShardedListAndWatch=true`, then `=false`: the members then "+
		"filter on their side), %d namespaces, the macro benchmark's policies; members are operator processes with "+
		"`--shard-index i --shard-count n` (none for 1), `--leader-elect`, started together; the reports are deleted between rounds. "+
		"First audit: start to the last report event before 3 s of quiet with the summed summaries equal to the model "+
		"(%s results). Bytes read: the process's `rchar` (its network input). Same as 1: every namespace's summed summary and every "+
		"listed result equal the single replica's under the same gate.", r.Namespaces, thousands(r.Expected.total()))
	p("")
	p("| gate | replicas | first audit | same as 1 | member | own reports written after (readyz ok after) | CPU | peak RSS | bytes read | LIST / WATCH (all members; LISTs sent with shardSelector) | reports by shard |")
	p("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, rd := range r.Rounds {
		same := "(reference)"
		if rd.SameAsSingle != nil {
			same = "yes"
			if !*rd.SameAsSingle {
				same = "**NO**: " + strings.Join(rd.Differences, "; ")
			}
		}
		if !rd.Matched {
			same += " (summaries **differ from the model**)"
		}
		var shards []string
		for s, n := range rd.ReportsByShard {
			shards = append(shards, fmt.Sprintf("%s: %d", s, n))
		}
		sort.Strings(shards)
		gate := map[bool]string{true: "on", false: "off"}[rd.Gate]
		for i, m := range rd.Members {
			own := "none"
			if m.LastReportSeconds > 0 {
				own = secs(m.LastReportSeconds)
			}
			first, sm, reqs, rs := "", "", "", ""
			if i == 0 {
				first, sm = secs(rd.SettleSeconds), same
				reqs = fmt.Sprintf("%d / %d; %d", rd.Lists, rd.Watches, rd.ShardedLists)
				rs = strings.Join(shards, ", ")
			}
			p("| %s | %d | %s | %s | %d | %s | %s | %s | %s | %s | %s |", gate, rd.Replicas, first, sm, m.Index,
				own+" ("+secs(m.ReadySeconds)+")", secs(m.CPUSeconds), mib(m.HWM), mib(m.ReadBytes), reqs, rs)
		}
	}
	for _, e := range r.Errors {
		p("")
		p("Error: %s", e)
	}
	p("")
}
