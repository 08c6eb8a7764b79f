package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Result is one macro run's measurements.
type Result struct {
	Command    string
	Code       string // the commit the operator was built from
	Profiled   bool
	Machine    Machine
	Objects    int
	Namespaces int
	Kinds      map[string]int
	CRDs       int
	VAPs       int
	Bindings   int
	// AuditPolicies in Audit created beside the ValidatingAdmissionPolicies.
	AuditPolicies int
	IdleSeconds   float64
	Concurrency   int

	ViolatingObjects int
	Expected         counts
	CreateSeconds    float64
	// Seed is the -etcd-seed the run started on (its creation time is CreateSeconds); nil when the run
	// created its objects.
	Seed *Seed `json:",omitempty"`
	// ControlPlaneStartSeconds is how long the control plane took to start (over a seed: to load it).
	ControlPlaneStartSeconds float64
	// ControlPlaneEnd is the kube-apiserver's and etcd's memory at the end of the run.
	ControlPlaneEnd map[string]memory `json:",omitempty"`

	ListSeconds        float64
	ListRuns           []float64
	ListObjects        int
	ListByResource     map[string]float64
	ListWidgetsSeconds float64
	// CPU seconds of the median list run: the control plane serving it, the harness decoding it.
	ListControlPlaneCPUSeconds float64
	ListClientCPUSeconds       float64

	FirstAuditSeconds    float64
	ReadySeconds         float64
	FirstAuditCPUSeconds float64
	// CPU seconds of the control plane from operator start until the first audit settled.
	FirstAuditControlPlaneCPUSeconds float64
	// CPU seconds of the operator and of the control plane from operator start until readiness.
	ReadyCPUSeconds, ReadyControlPlaneCPUSeconds float64
	TotalCPUSeconds                              float64
	Summaries                                    counts
	SummariesMatch                               bool

	Baseline                      memory
	BaselineSettleSeconds         float64
	AfterFirstAudit               memory
	End                           memory
	BytesPerObject                float64
	BytesPerObjectAfterFirstAudit float64

	// Requests holds client requests per phase, in the order of Phases, from the API server's metrics.
	Requests map[string]requests
	// OperatorRequests holds the operator's own requests per phase, from the API server's audit log.
	OperatorRequests map[string]requests
	Phases           []string
	IdleReportEvents int
	// IdleAuditPolicyEvents counts the AuditPolicy watch events in the idle window: any write of one.
	IdleAuditPolicyEvents int

	// The AuditPolicies' statuses against the model once the first audit settled, and at the end of the run;
	// StatusBaseline in the baseline run, where no AuditPolicy matches anything.
	StatusAfterFirstAudit, StatusEnd, StatusBaseline *StatusCheck

	Flips []FlipResult
	Edit  struct {
		Seconds, Ratio float64
		ChangedResults int
		Matched        bool
	}
	ReportsAfterFirstAudit, ReportsEnd struct{ Count, Bytes, Listed int }
	// EtcdAfterFirstAudit and EtcdEnd are the reports' bytes in etcd and etcd's database size.
	EtcdAfterFirstAudit, EtcdEnd *EtcdBytes `json:",omitempty"`

	Errors []string
}

// Phases in which API requests are counted.
const (
	phaseBackground = "background 10 s, before the operator"
	phaseFirstAudit = "first audit"
	phaseIdle       = "idle"
	phaseEdit       = "policy edit"
)

// FlipResult is the change-to-report latency of one kind's updates.
type FlipResult struct {
	Kind, Policy                    string
	Count, Measured, Unseen, Failed int
	FailedSample                    []string
	AchievedRate                    float64
	P50, P99, Max                   float64
	SummariesMatch                  bool
	// CPU seconds from the first update until the last report event was seen, and that window's length.
	WindowSeconds, OperatorCPU, ControlPlaneCPU, HarnessCPU float64
}

// Machine describes where the benchmark ran.
type Machine struct {
	NProc     int
	MemTotal  string
	CPUModel  string
	Date      string
	LoadAvg   string
	GoVersion string
}

func machineInfo() Machine {
	m := Machine{NProc: runtime.NumCPU(), Date: time.Now().UTC().Format("2006-01-02 15:04 MST"), GoVersion: runtime.Version()}
	if out, err := exec.Command("nproc").Output(); err == nil {
		m.NProc, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	}
	m.MemTotal = procLine("/proc/meminfo", "MemTotal")
	m.CPUModel = procLine("/proc/cpuinfo", "model name")
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// codeVersion describes the tree the operator is built from: the commit and how many files outside the
// benchmark differ from it.
func codeVersion(repo string) string {
	head, err := exec.Command("git", "-C", repo, "log", "-1", "--format=%h (%cd)", "--date=format:%Y-%m-%d %H:%M").Output()
	if err != nil {
		return "an unknown commit"
	}
	out := "commit " + strings.TrimSpace(string(head))
	dirty, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--", ".",
		":(exclude)test/bench", ":(exclude)hack/bench.sh", ":(exclude)BENCHMARKS.md", ":(exclude)bin").Output()
	if err == nil && len(strings.TrimSpace(string(dirty))) > 0 {
		out += fmt.Sprintf(" plus %d uncommitted files", len(strings.Split(strings.TrimSpace(string(dirty)), "\n")))
	}
	return out
}

func procLine(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func secs(s float64) string {
	switch {
	case s < 1:
		return fmt.Sprintf("%.0f ms", s*1000)
	default:
		return fmt.Sprintf("%.2f s", s)
	}
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func writeResult(c config, r *Result) error {
	if c.jsonOut != "" {
		b, err := json.MarshalIndent(r, "", "  ")
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
	markdown(w, r)
	return nil
}

// printer prints one line of markdown.
type printer func(format string, args ...any)

// markdown writes the section of one run: what was measured on which cluster, the measures, the AuditPolicy
// statuses, the LIST time per resource and the API requests.
func markdown(w io.Writer, r *Result) {
	p := printer(func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) })
	mdCluster(p, r)
	p("| measure | value |")
	p("| --- | --- |")
	mdFirstAudit(p, r)
	mdIdle(p, r)
	mdChanges(p, r)
	mdStatuses(p, r)
	mdLists(p, r)
	mdRequests(p, r)
}

// mdCluster writes the heading, the run's command and machine, and the cluster measured.
func mdCluster(p printer, r *Result) {
	p("### N = %s audited objects%s", thousands(r.Objects), apSuffix(r))
	p("")
	p("`%s` — %s; operator built from %s; %d CPUs (`nproc`), %s, %s; load average at start %s (other builds share the machine).",
		r.Command, r.Machine.Date, r.Code, r.Machine.NProc, r.Machine.MemTotal, r.Machine.CPUModel, r.Machine.LoadAvg)
	p("")
	if r.Profiled {
		p("*Profiling build of the operator (test/bench/profiled): numbers include the CPU profiler's overhead.*")
		p("")
	}
	var kinds []string
	for k, n := range r.Kinds {
		kinds = append(kinds, fmt.Sprintf("%s %s", thousands(n), k))
	}
	sort.Strings(kinds)
	p("Cluster: %s across %d namespaces (plus %d `Limits` param objects, audited against their CRD's schema); "+
		"%d CRDs (widgets with rules in 2 served versions, gadgets with a rule, limits), %d ValidatingAdmissionPolicies with %d bindings "+
		"(params from a ConfigMap and from a CRD, namespace and object selectors, a matchCondition, namespaceObject; "+
		"[Deny], [Warn, Audit] and [Audit]); %s. %s objects violate a rule. Created in %s (%.0f objects/s, %d goroutines).",
		strings.Join(kinds, ", "), r.Namespaces, r.Namespaces, r.CRDs, r.VAPs, r.Bindings, apDescription(r.AuditPolicies),
		thousands(r.ViolatingObjects), secs(r.CreateSeconds), float64(r.Objects)/max(r.CreateSeconds, 1e-9), r.Concurrency)
	p("")
	if s := r.Seed; s != nil {
		p("The objects were created once, %s (load average %s at the start, %s at the end; no audit log; etcd data %s), "+
			"into an `-etcd-seed` directory; this run started its control plane on a copy of it (%s to start and fill the watch caches). "+
			"Control plane memory at the end of the creation: %s.",
			s.Created.Format("2006-01-02 15:04 UTC"), s.LoadStart, s.LoadEnd, mib(s.DataBytes), secs(r.ControlPlaneStartSeconds), cpMemory(s.ControlPlane))
		p("")
	}
	if len(r.ControlPlaneEnd) > 0 {
		p("Control plane memory at the end of the run: %s.", cpMemory(r.ControlPlaneEnd))
		p("")
	}
}

// cpMemory formats the control plane's memory: VmRSS (VmHWM) of each process.
func cpMemory(m map[string]memory) string {
	var out []string
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if x, ok := m[name]; ok {
			out = append(out, fmt.Sprintf("%s RSS %s (peak %s)", name, mib(x.RSS), mib(x.HWM)))
		}
	}
	return strings.Join(out, ", ")
}

// mdFirstAudit writes the rows of the bare LIST and the first audit: time, CPU, results and memory.
func mdFirstAudit(p printer, r *Result) {
	p("| `list`: one bare paginated LIST (limit 500, dynamic client) of all %s audited objects, median of 3 | %s (runs: %s) |",
		thousands(r.ListObjects), secs(r.ListSeconds), joinSecs(r.ListRuns))
	p("| `first-audit`: operator start to the last report event before 3 s of quiet | **%s** = **%.2f× list** (readyz `audit` ok after %s) |",
		secs(r.FirstAuditSeconds), r.FirstAuditSeconds/max(r.ListSeconds, 1e-9), secs(r.ReadySeconds))
	p("| operator CPU during the first audit (user + system) | %s |", secs(r.FirstAuditCPUSeconds))
	if r.ListControlPlaneCPUSeconds > 0 {
		p("| CPU of the median `list` run: control plane (kube-apiserver + etcd) / listing client | %s / %s |",
			secs(r.ListControlPlaneCPUSeconds), secs(r.ListClientCPUSeconds))
	}
	if r.FirstAuditControlPlaneCPUSeconds > 0 {
		p("| control plane CPU from operator start until the first audit settled (includes the 3 s of quiet) | %s |",
			secs(r.FirstAuditControlPlaneCPUSeconds))
	}
	if r.ReadyCPUSeconds > 0 && r.ReadySeconds > 0 {
		// Both CPU readings after readiness were taken once the reports had been quiet for 3 s.
		after := r.FirstAuditSeconds - r.ReadySeconds + 3
		p("| cores used until readiness (%s, evaluation) / from readiness until settled (%s, report writes and 3 s of quiet): operator, control plane | %.2f, %.2f / %.2f, %.2f |",
			secs(r.ReadySeconds), secs(after),
			r.ReadyCPUSeconds/r.ReadySeconds, r.ReadyControlPlaneCPUSeconds/r.ReadySeconds,
			(r.FirstAuditCPUSeconds-r.ReadyCPUSeconds)/after, (r.FirstAuditControlPlaneCPUSeconds-r.ReadyControlPlaneCPUSeconds)/after)
	}
	match := "yes"
	if !r.SummariesMatch {
		match = "**NO**"
	}
	p("| summed report summaries equal the expected results | %s: %s results (pass %s, fail %s, warn %s, error %d, skip %d); expected %s (pass %s, fail %s, warn %s) |",
		match, thousands(r.Summaries.total()), thousands(r.Summaries.Pass), thousands(r.Summaries.Fail), thousands(r.Summaries.Warn),
		r.Summaries.Error, r.Summaries.Skip, thousands(r.Expected.total()), thousands(r.Expected.Pass), thousands(r.Expected.Fail), thousands(r.Expected.Warn))
	p("| operator peak RSS (VmHWM) after the first audit / at the end | %s / %s (largest 100 ms VmRSS sample %s) |",
		mib(r.AfterFirstAudit.HWM), mib(r.End.HWM), mib(r.End.SampledMax))
	p("| same policies, no audited objects: VmHWM | %s (settled in %s) |", mib(r.Baseline.HWM), secs(r.BaselineSettleSeconds))
	p("| bytes per audited object above the empty baseline (end VmHWM; after first audit) | **%.0f B**; %.0f B |", r.BytesPerObject, r.BytesPerObjectAfterFirstAudit)
}

// mdIdle writes the rows of the idle window, and those of the AuditPolicies' statuses.
func mdIdle(p printer, r *Result) {
	p("| idle %s: report writes / LIST calls by the operator (audit log) / report events | %d / %d / %d (all clients, metrics: %d / %d) |", idleString(r),
		r.OperatorRequests[phaseIdle].sum(writeVerbs, isReport), r.OperatorRequests[phaseIdle].sum([]string{"LIST"}, nil), r.IdleReportEvents,
		r.Requests[phaseIdle].sum(writeVerbs, isReport), r.Requests[phaseIdle].sum([]string{"LIST"}, nil))
	if r.AuditPolicies > 0 {
		p("| idle %s: AuditPolicy status writes / other AuditPolicy writes by the operator (audit log) / AuditPolicy watch events | %d / %d / %d (all clients, metrics: %d) |", idleString(r),
			r.OperatorRequests[phaseIdle].sum(writeVerbs, isAuditPolicyStatus),
			r.OperatorRequests[phaseIdle].sum(writeVerbs, isAuditPolicy)-r.OperatorRequests[phaseIdle].sum(writeVerbs, isAuditPolicyStatus),
			r.IdleAuditPolicyEvents, r.Requests[phaseIdle].sum(writeVerbs, isAuditPolicy))
		p("| AuditPolicy status writes by the operator during the first audit (audit log) | %d |", r.OperatorRequests[phaseFirstAudit].sum(writeVerbs, isAuditPolicyStatus))
		p("| every AuditPolicy's status (matched, pass, fail, warn, error, skip, SafeToEnforce) equals the model, after the first audit | %s |", statusCheckString(r.StatusAfterFirstAudit, "after operator start"))
		p("| the same at the end, after the updates and the policy edit | %s |", statusCheckString(r.StatusEnd, "after the check began"))
		p("| the same in the baseline run (no audited objects: every count 0, SafeToEnforce True) | %s |", statusCheckString(r.StatusBaseline, "after operator start"))
	}
}

// mdChanges writes the rows of the updates, the policy edit, the reports' size and the operator's CPU.
func mdChanges(p printer, r *Result) {
	for _, f := range r.Flips {
		p("| change-to-report latency, %d %s updates at %.1f/s flipping compliance for %s (update response to report event) | p50 **%s**, p99 **%s**, max %s (%d measured, %d never seen, %d failed; summaries match after: %v) |",
			f.Count, f.Kind, f.AchievedRate, f.Policy, secs(f.P50), secs(f.P99), secs(f.Max), f.Measured, f.Unseen, f.Failed, f.SummariesMatch)
		if f.WindowSeconds > 0 {
			p("| CPU while the %d %s updates were applied and reported (%s): operator / control plane / harness | %s / %s / %s (%.0f%% of %d cores) |",
				f.Count, f.Kind, secs(f.WindowSeconds), secs(f.OperatorCPU), secs(f.ControlPlaneCPU), secs(f.HarnessCPU),
				100*(f.OperatorCPU+f.ControlPlaneCPU+f.HarnessCPU)/(f.WindowSeconds*float64(max(r.Machine.NProc, 1))), r.Machine.NProc)
		}
	}
	p("| policy edit (widget color expression; %d results change) to all reports updated | **%s** = %.2f× the widgets list (%s); summaries match: %v |",
		r.Edit.ChangedResults, secs(r.Edit.Seconds), r.Edit.Ratio, secs(r.ListWidgetsSeconds), r.Edit.Matched)
	p("| reports stored after the first audit / at the end: objects, JSON bytes, listed results | %d, %s B, %s / %d, %s B, %s |",
		r.ReportsAfterFirstAudit.Count, thousands(r.ReportsAfterFirstAudit.Bytes), thousands(r.ReportsAfterFirstAudit.Listed),
		r.ReportsEnd.Count, thousands(r.ReportsEnd.Bytes), thousands(r.ReportsEnd.Listed))
	if r.EtcdAfterFirstAudit != nil && r.EtcdEnd != nil {
		p("| reports in etcd (keys and values as stored) after the first audit / at the end: keys, bytes; etcd database size (in use) | %d, %s B / %d, %s B; %s (%s) |",
			r.EtcdAfterFirstAudit.ReportKeys, thousands(int(r.EtcdAfterFirstAudit.ReportBytes)), r.EtcdEnd.ReportKeys, thousands(int(r.EtcdEnd.ReportBytes)),
			mib(r.EtcdEnd.DBSize), mib(r.EtcdEnd.DBSizeInUse))
	}
	p("| operator CPU, whole run | %s |", secs(r.TotalCPUSeconds))
}

// mdStatuses writes the table of the AuditPolicies' statuses after the first audit against the model.
func mdStatuses(p printer, r *Result) {
	c := r.StatusAfterFirstAudit
	if c == nil || len(c.Expected) == 0 {
		return
	}
	p("")
	p("AuditPolicy statuses after the first audit, expected by the model (a status that differs is shown as got ≠ want):")
	p("")
	p("| AuditPolicy | matched | pass | warn | error | fail / skip | SafeToEnforce |")
	p("| --- | --- | --- | --- | --- | --- | --- |")
	names := make([]string, 0, len(c.Expected))
	for n := range c.Expected {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w, g := c.Expected[n], c.Got[n]
		cell := func(want, got int) string {
			if want == got {
				return thousands(want)
			}
			return fmt.Sprintf("**%s ≠ %s**", thousands(got), thousands(want))
		}
		safe := w.SafeToEnforce
		if g.SafeToEnforce != w.SafeToEnforce {
			safe = fmt.Sprintf("**%q ≠ %s**", g.SafeToEnforce, w.SafeToEnforce)
		}
		p("| %s | %s | %s | %s | %s | %s / %s | %s |", n, cell(w.Matched, g.Matched), cell(w.Pass, g.Pass), cell(w.Warn, g.Warn),
			cell(w.Error, g.Error), cell(w.Fail, g.Fail), cell(w.Skip, g.Skip), safe)
	}
}

// mdLists writes the LIST time per resource of the median run.
func mdLists(p printer, r *Result) {
	p("")
	p("LIST time per resource (median run):")
	p("")
	p("| resource | seconds |")
	p("| --- | --- |")
	names := make([]string, 0, len(r.ListByResource))
	for k := range r.ListByResource {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		p("| %s | %.3f |", k, r.ListByResource[k])
	}
	p("")
}

// mdRequests writes the API requests by phase, of the operator and of all clients, and the run's errors.
func mdRequests(p printer, r *Result) {
	p("API requests of the operator, by phase, from the API server's audit log (user `%s`; a WATCH is counted when it starts):", operatorUser)
	p("")
	requestTable(p, r, r.OperatorRequests)
	p("")
	p("API requests of all clients, by phase, from the API server's metrics (`apiserver_request_total` minus " +
		"`apiserver_self_requests_total`, minus the harness's own requests in the window: the PATCHes of the update phases, " +
		"the GET and PUT of the policy edit; the harness's report watches started before the first window; a WATCH is " +
		"counted when it ends). What is not in the table above comes from the control plane's own clients:")
	p("")
	requestTable(p, r, r.Requests)
	if len(r.Errors) > 0 {
		p("")
		p("Errors during the run:")
		for _, e := range r.Errors {
			p("- %s", e)
		}
	}
	p("")
}

// apSuffix names the AuditPolicies of a run in headings and goal rows.
func apSuffix(r *Result) string {
	if r.AuditPolicies == 0 {
		return ""
	}
	return fmt.Sprintf(" + %d AuditPolicies", r.AuditPolicies)
}

func apDescription(n int) string {
	if n == 0 {
		return "no AuditPolicies"
	}
	return fmt.Sprintf("**%d AuditPolicies** in Audit over the same resources (5 converted from those policies with "+
		"`envtestutil.AuditPolicyFor`, 5 written directly: params by name, by the object's namespace and by label selector, "+
		"namespace and object selectors, a variable, a matchCondition, two validations, one that errors on some objects; "+
		"past ten they repeat under new names)", n)
}

func statusCheckString(c *StatusCheck, since string) string {
	switch {
	case c == nil:
		return "not checked"
	case c.Matched:
		return fmt.Sprintf("yes (statuses last changed %s %s)", secs(c.Seconds), since)
	}
	return fmt.Sprintf("**NO**: %s", strings.Join(c.Mismatches, "; "))
}

func requestTable(p func(string, ...any), r *Result, by map[string]requests) {
	header, rule := "| verb resource |", "| --- |"
	for _, ph := range r.Phases {
		if ph == phaseIdle {
			ph = "idle " + idleString(r)
		}
		header += " " + ph + " |"
		rule += " --- |"
	}
	p("%s", header)
	p("%s", rule)
	all := requests{}
	for _, rs := range by {
		for k := range rs {
			all[k] = 1
		}
	}
	for _, k := range all.keys() {
		row := "| " + k + " |"
		for _, ph := range r.Phases {
			row += " " + count(by[ph][k]) + " |"
		}
		p("%s", row)
	}
}

func idleString(r *Result) string { return (time.Duration(r.IdleSeconds) * time.Second).String() }

func count(v float64) string {
	if v == 0 {
		return ""
	}
	return strconv.Itoa(int(v + 0.5))
}

func joinSecs(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, ", ") + " s"
}

// Goals.

func readResults(files string) ([]*Result, error) {
	var out []*Result
	for _, f := range strings.Split(files, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r := &Result{}
		if err := json.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Objects != out[j].Objects {
			return out[i].Objects < out[j].Objects
		}
		return out[i].AuditPolicies < out[j].AuditPolicies
	})
	return out, nil
}

func writeGoals(c config) error {
	rs, err := readResults(c.goals)
	if err != nil {
		return err
	}
	w, closeOut, err := openOutput(c.out)
	if err != nil {
		return err
	}
	defer closeOut()
	p := printer(func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) })
	p("| goal | N | measured | verdict |")
	p("| --- | --- | --- | --- |")
	for _, goal := range []func(printer, []*Result){goalFirstAudit, goalMemory, goalIdle, goalLatency, goalEdit, goalStatuses, goalAuditPolicyCost} {
		goal(p, rs)
	}
	return nil
}

// met is the verdict of a goal.
func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// goalFirstAudit writes the goal of the first audit's time against a bare LIST, for each run.
func goalFirstAudit(p printer, rs []*Result) {
	for _, r := range rs {
		ratio := r.FirstAuditSeconds / max(r.ListSeconds, 1e-9)
		p("| first-audit <= 1.5× list | %s | %s / %s = %.2f× | %s |", runLabel(r), secs(r.FirstAuditSeconds), secs(r.ListSeconds), ratio, met(ratio <= 1.5 && r.SummariesMatch))
	}
}

// goalMemory writes the goal of the memory per audited object, for each run.
func goalMemory(p printer, rs []*Result) {
	for _, r := range rs {
		n := thousands(r.Objects)
		scope := ""
		if r.Objects < 100000 {
			scope = " (the goal is stated at 100,000)"
		}
		p("| RSS <= 1 KiB per audited object above the empty baseline | %s | (%s − %s) / %s = %.0f B%s | %s |",
			runLabel(r), mib(r.End.HWM), mib(r.Baseline.HWM), n, r.BytesPerObject, scope, met(r.Baseline.HWM > 0 && r.BytesPerObject <= 1024))
	}
	for _, r := range rs {
		if r.Objects < 100000 {
			continue
		}
		p("| operator RSS <= 1 GiB (stated at 1,000,000 objects) | %s | peak %s | %s |", runLabel(r), mib(r.End.HWM), met(r.End.HWM > 0 && r.End.HWM <= 1<<30))
	}
}

// goalIdle writes the goal of an idle operator's writes and LISTs, for each run.
func goalIdle(p printer, rs []*Result) {
	for _, r := range rs {
		writes := r.OperatorRequests[phaseIdle].sum(writeVerbs, isReport)
		lists := r.OperatorRequests[phaseIdle].sum([]string{"LIST"}, nil)
		if r.AuditPolicies == 0 {
			p("| zero report writes and no LIST calls while idle (%s) | %s | operator: %d report writes, %d LISTs (all clients: %d, %d) | %s |",
				idleString(r), runLabel(r), writes, lists, r.Requests[phaseIdle].sum(writeVerbs, isReport),
				r.Requests[phaseIdle].sum([]string{"LIST"}, nil), met(r.OperatorRequests != nil && writes == 0 && lists == 0))
			continue
		}
		apWrites := r.OperatorRequests[phaseIdle].sum(writeVerbs, isAuditPolicy)
		p("| zero report writes, AuditPolicy status writes and LIST calls while idle (%s) | %s | operator: %d report writes, %d AuditPolicy writes, %d LISTs (all clients: %d, %d, %d; %d AuditPolicy events) | %s |",
			idleString(r), runLabel(r), writes, apWrites, lists, r.Requests[phaseIdle].sum(writeVerbs, isReport),
			r.Requests[phaseIdle].sum(writeVerbs, isAuditPolicy), r.Requests[phaseIdle].sum([]string{"LIST"}, nil), r.IdleAuditPolicyEvents,
			met(r.OperatorRequests != nil && writes == 0 && apWrites == 0 && lists == 0 && r.IdleAuditPolicyEvents == 0))
	}
}

// goalLatency writes the goal of change-to-report latency, for each run's updates.
func goalLatency(p printer, rs []*Result) {
	for _, r := range rs {
		for _, f := range r.Flips {
			ok := f.Measured > 0 && f.P99 < 2 && f.Unseen == 0 && f.Failed == 0
			p("| change-to-report p99 < 2 s at 50 changes/s | %s | %s updates (%s): p99 %s, p50 %s over %d updates at %.1f/s, %d never seen | %s |",
				runLabel(r), f.Kind, f.Policy, secs(f.P99), secs(f.P50), f.Count, f.AchievedRate, f.Unseen, met(ok))
		}
	}
}

// goalEdit writes the goal of a policy edit's time to complete reports, for each run.
func goalEdit(p printer, rs []*Result) {
	for _, r := range rs {
		p("| policy edit to complete reports within 2× list of the affected kinds | %s | %s / %s (widgets) = %.2f× | %s |",
			runLabel(r), secs(r.Edit.Seconds), secs(r.ListWidgetsSeconds), r.Edit.Ratio, met(r.Edit.Matched && r.Edit.Ratio <= 2))
	}
}

// goalStatuses writes the goal of the AuditPolicies' statuses, for each run with AuditPolicies.
func goalStatuses(p printer, rs []*Result) {
	for _, r := range rs {
		if r.AuditPolicies == 0 {
			continue
		}
		for _, c := range []struct {
			when  string
			check *StatusCheck
		}{{"after the first audit", r.StatusAfterFirstAudit}, {"at the end", r.StatusEnd}} {
			measured := "not checked"
			if c.check != nil {
				measured = fmt.Sprintf("%d of %d equal", len(c.check.Expected)-len(c.check.Mismatches), len(c.check.Expected))
			}
			p("| every AuditPolicy status equals the model %s | %s | %s | %s |", c.when, runLabel(r), measured, met(c.check != nil && c.check.Matched))
		}
	}
}

// goalAuditPolicyCost writes the goals of what AuditPolicies cost, for each run with AuditPolicies beside the
// run without any at the same object count.
func goalAuditPolicyCost(p printer, rs []*Result) {
	for _, pair := range auditPolicyPairs(rs) {
		with, without := pair[0], pair[1]
		rw := with.FirstAuditSeconds / max(with.ListSeconds, 1e-9)
		ro := without.FirstAuditSeconds / max(without.ListSeconds, 1e-9)
		p("| with %d AuditPolicies, first-audit / list within 10%% of the run without | %s | %.2f× / %.2f× = %+.0f%% | %s |",
			with.AuditPolicies, thousands(with.Objects), rw, ro, 100*(rw/max(ro, 1e-9)-1), met(rw <= 1.1*ro))
		p("| with %d AuditPolicies, RSS per audited object within 10%% of the run without | %s | %.0f B / %.0f B = %+.0f%% | %s |",
			with.AuditPolicies, thousands(with.Objects), with.BytesPerObject, without.BytesPerObject,
			100*(with.BytesPerObject/max(without.BytesPerObject, 1e-9)-1), met(with.BytesPerObject <= 1.1*without.BytesPerObject))
	}
}

// runLabel names a run in the goals table: its object count, and its AuditPolicies if any.
func runLabel(r *Result) string { return thousands(r.Objects) + apSuffix(r) }

// auditPolicyPairs pairs each run with AuditPolicies with the run without any at the same object count.
func auditPolicyPairs(rs []*Result) [][2]*Result {
	var out [][2]*Result
	for _, with := range rs {
		if with.AuditPolicies == 0 {
			continue
		}
		for _, without := range rs {
			if without.AuditPolicies == 0 && without.Objects == with.Objects {
				out = append(out, [2]*Result{with, without})
				break
			}
		}
	}
	return out
}

// Micro benchmarks.

var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) B/op)?(?:\s+([\d.]+) allocs/op)?`)

// benchStat is the runs of one micro benchmark.
type benchStat struct{ ns, bytes, allocs []float64 }

func writeMicro(c config) error {
	stats, order, err := readMicro(c.micro)
	if err != nil {
		return err
	}
	med := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		return v[len(v)/2]
	}
	floorOf := map[string]string{
		"CRDRule/pass": "CELFloor/self/pass", "CRDRule/fail": "CELFloor/self/fail",
		"VAPValidation/pass": "CELFloor/object/pass", "VAPValidation/fail": "CELFloor/object/fail",
	}
	w, closeOut, err := openOutput(c.out)
	if err != nil {
		return err
	}
	defer closeOut()
	fmt.Fprintln(w, "| benchmark (one rule, one object) | ns/op (median) | B/op | allocs/op | × bare cel-go |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, name := range order {
		s := stats[name]
		ratio := "1 (floor)"
		if fl, ok := floorOf[name]; ok && stats[fl] != nil {
			ratio = fmt.Sprintf("%.0f× (%s)", med(s.ns)/med(stats[fl].ns), fl)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.0f | %s |\n", name, thousands(int(med(s.ns)+0.5)), thousands(int(med(s.bytes)+0.5)), med(s.allocs), ratio)
	}
	return nil
}

// readMicro reads the runs of each benchmark of a 'go test -bench' output file, and the benchmarks' names in
// the order they first appear.
func readMicro(path string) (map[string]*benchStat, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	stats := map[string]*benchStat{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		s := stats[m[1]]
		if s == nil {
			s = &benchStat{}
			stats[m[1]] = s
			order = append(order, m[1])
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		b, _ := strconv.ParseFloat(m[3], 64)
		a, _ := strconv.ParseFloat(m[4], 64)
		s.ns, s.bytes, s.allocs = append(s.ns, ns), append(s.bytes, b), append(s.allocs, a)
	}
	return stats, order, sc.Err()
}

// openOutput returns the file at path for writing, or standard output when path is empty, and how to close it.
func openOutput(path string) (io.Writer, func(), error) {
	if path == "" {
		return os.Stdout, func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("creating %s: %w", path, err)
	}
	return f, func() { _ = f.Close() }, nil
}
