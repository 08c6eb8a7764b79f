package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// cluster is a prepared control plane.
type cluster struct {
	env        *envtestutil.Env
	client     client.Client
	dyn        dynamic.Interface
	metrics    apiMetrics
	kubeconfig string
	auditLog   string
	windows    []window
	objects    []*object
	model      model
	reports    *reports
	// aps follows the AuditPolicies' statuses; nil without AuditPolicies.
	aps    *auditPolicyWatch
	cancel context.CancelFunc
	// removeOnStop is a directory removed once the control plane stopped: a run's copy of a seed.
	removeOnStop string
}

// prepare starts a control plane and stores the cluster of n objects: CRDs without rules, namespaces,
// params and objects, then the CRD rules and the policies (so that violating objects could be stored).
func prepare(ctx context.Context, c config, n int, res *Result) (*cluster, error) {
	o := envOptions{dir: filepath.Join(c.workdir, fmt.Sprintf("apiserver-%d", n)), quota: c.quotaBackendBytes, audit: true, featureGates: c.apiFeatureGates}
	seeded := c.etcdSeed != "" && n > 0
	if seeded {
		s, err := ensureSeed(ctx, c, n)
		if err != nil {
			return nil, fmt.Errorf("seed: %w", err)
		}
		res.Seed = &s
		res.CreateSeconds = s.CreateSeconds
		o.etcdData = filepath.Join(o.dir, "etcd")
		if err := copySeed(c.etcdSeed, o.etcdData); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	env, auditLog, err := startEnv(o)
	if err != nil {
		return nil, err
	}
	res.ControlPlaneStartSeconds = time.Since(start).Seconds()
	cl := &cluster{env: env, auditLog: auditLog, model: model{namespaces: c.namespaces, auditPolicies: c.auditPolicies}}
	if seeded {
		// The copy is only for this run.
		cl.removeOnStop = o.etcdData
	}
	if err := cl.connect(filepath.Join(c.workdir, fmt.Sprintf("kubeconfig-%d", n))); err != nil {
		cl.stop()
		return nil, err
	}
	if err := cl.store(ctx, c, n, res, seeded); err != nil {
		cl.stop()
		return nil, err
	}
	if err := cl.follow(ctx, c); err != nil {
		cl.stop()
		return nil, err
	}
	return cl, nil
}

// connect makes the harness's clients, unthrottled, and writes the kubeconfig of the operator's user to
// kubeconfig.
func (cl *cluster) connect(kubeconfig string) error {
	cfg := rest.CopyConfig(cl.env.Config)
	cfg.QPS, cfg.Burst = 10000, 20000
	var err error
	if cl.client, err = client.New(cfg, client.Options{Scheme: cl.env.Client.Scheme()}); err != nil {
		return err
	}
	if cl.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cl.metrics = apiMetrics{client: cs.CoreV1().RESTClient()}
	user, err := cl.env.AddUser(envtest.User{Name: "celaudit", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding the operator's user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	cl.kubeconfig = kubeconfig
	return os.WriteFile(cl.kubeconfig, kc, 0o600)
}

// store stores the CRDs without rules, the namespaces, params and n objects, then the CRD rules, the
// policies and the AuditPolicies.
// With seeded, the control plane runs on a copy of a seed, which holds everything before the rules.
func (cl *cluster) store(ctx context.Context, c config, n int, res *Result, seeded bool) error {
	cl.objects = plan(n, c.namespaces)
	if !seeded {
		if err := setupCluster(ctx, cl.client, c.namespaces); err != nil {
			return err
		}
	}
	if n > 0 && !seeded {
		logf("creating %d objects with %d goroutines", n, c.concurrency)
		took, err := createAll(ctx, cl.client, cl.objects, c.concurrency)
		if err != nil {
			return err
		}
		res.CreateSeconds = took.Seconds()
		logf("created %d objects in %s (%.0f/s)", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	}
	if err := tighten(ctx, cl.client); err != nil {
		return err
	}
	var err error
	if res.VAPs, res.Bindings, err = installPolicies(ctx, cl.client); err != nil {
		return err
	}
	res.CRDs = 3
	if err := installAuditPolicies(ctx, cl.client, auditPolicies(c.auditPolicies)); err != nil {
		return err
	}
	res.AuditPolicies = c.auditPolicies
	return nil
}

// follow watches the reports and, with AuditPolicies, their statuses. Policies and CRD rule changes take
// effect in the API server asynchronously; nothing after this writes an object they could reject until the
// flip phase, which writes compliant values only.
func (cl *cluster) follow(ctx context.Context, c config) error {
	wctx, cancel := context.WithCancel(ctx)
	cl.cancel = cancel
	cl.reports = newReports()
	if err := cl.reports.watch(wctx, cl.dyn, reportAPI(c)); err != nil {
		return err
	}
	if c.auditPolicies > 0 {
		cl.aps = newAuditPolicyWatch()
		if err := cl.aps.watch(wctx, cl.dyn); err != nil {
			return err
		}
	}
	return nil
}

// mark records a measured window, from start to now.
func (cl *cluster) mark(phase string, start time.Time) {
	cl.windows = append(cl.windows, window{Phase: phase, Start: start, End: time.Now()})
}

func (cl *cluster) stop() {
	if cl.cancel != nil {
		cl.cancel()
	}
	if err := cl.env.Stop(); err != nil {
		logf("stopping control plane: %v", err)
	}
	if cl.removeOnStop != "" {
		if err := os.RemoveAll(cl.removeOnStop); err != nil {
			logf("removing %s: %v", cl.removeOnStop, err)
		}
	}
}

func operatorArgs(c config) []string {
	return strings.Fields(c.operatorFlags)
}

// reportAPI is the --report-api the operator runs with: wgpolicy unless -operator-flags says otherwise.
func reportAPI(c config) string {
	api := "wgpolicy"
	args := operatorArgs(c)
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--report-api="):
			api = strings.TrimPrefix(a, "--report-api=")
		case a == "--report-api" && i+1 < len(args):
			api = args[i+1]
		}
	}
	return api
}

// runBaseline measures the operator's memory with every policy installed and no audited objects.
func runBaseline(ctx context.Context, c config, res *Result) error {
	cl, err := prepare(ctx, c, 0, &Result{})
	if err != nil {
		return err
	}
	defer cl.stop()
	want, _ := cl.model.expected(nil)
	op, err := startOperator(c.bin, cl.kubeconfig, filepath.Join(c.workdir, "operator-baseline.log"), operatorArgs(c), strings.Fields(c.operatorEnv))
	if err != nil {
		return err
	}
	defer op.stop()
	ready, _ := op.readyPoller(ctx, nil)
	last, got, matched := cl.reports.waitSettled(ctx, ready, want, 3*time.Second, 5*time.Minute)
	if !matched {
		return fmt.Errorf("baseline reports did not settle: summaries %+v, want %+v; %w", got, want, op.running())
	}
	res.BaselineSettleSeconds = last.Sub(op.started).Seconds()
	if cl.aps != nil {
		// Measured like the main run: once the AuditPolicies' statuses are written too.
		check := cl.aps.waitStatuses(ctx, cl.model.statuses(nil), op.started, 3*time.Second, c.statusTimeout)
		res.StatusBaseline = &check
		logf("baseline AuditPolicy statuses match the model: %v %v", check.Matched, check.Mismatches)
	}
	time.Sleep(10 * time.Second) // let the first watches and caches reach their steady state
	m, err := op.memory()
	if err != nil {
		return err
	}
	res.Baseline = m
	logf("baseline settled in %.1fs, VmHWM %s", res.BaselineSettleSeconds, mib(m.HWM))
	return nil
}

// audited are the resources whose objects the audit reads, each object once (widgets at their storage
// version); the audit also reads widgets as v1beta1 because the CRD's rules are evaluated per served version.
func auditedResources() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{widget.resource(), gadget.resource(), configMap.resource(), deployment.resource(), limitsGVR}
}

// listTimes lists each resource, all namespaces, limit 500, and returns the wall time and object count of each.
func listTimes(ctx context.Context, dyn dynamic.Interface, gvrs []schema.GroupVersionResource) (map[string]float64, int, error) {
	out := map[string]float64{}
	total := 0
	for _, gvr := range gvrs {
		start := time.Now()
		opts := metav1.ListOptions{Limit: 500}
		for {
			page, err := dyn.Resource(gvr).List(ctx, opts)
			if err != nil {
				return nil, 0, fmt.Errorf("listing %s: %w", gvr, err)
			}
			total += len(page.Items)
			if page.GetContinue() == "" {
				break
			}
			opts.Continue = page.GetContinue()
		}
		out[scan.ResourceString(gvr)] = time.Since(start).Seconds()
	}
	return out, total, nil
}

func sumValues(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

// measureList times three bare LISTs of all audited objects and keeps the median.
func measureList(ctx context.Context, cl *cluster, res *Result) error {
	var (
		runs []map[string]float64
		cpu  [][2]float64
	)
	for range 3 {
		meter := startCPU()
		m, n, err := listTimes(ctx, cl.dyn, auditedResources())
		if err != nil {
			return err
		}
		cp, self := meter.stop()
		cpu = append(cpu, [2]float64{cp, self})
		res.ListObjects = n
		runs = append(runs, m)
		res.ListRuns = append(res.ListRuns, sumValues(m))
	}
	order := []int{0, 1, 2}
	sort.Slice(order, func(i, j int) bool { return res.ListRuns[order[i]] < res.ListRuns[order[j]] })
	median := runs[order[1]]
	res.ListSeconds = res.ListRuns[order[1]]
	res.ListByResource = median
	res.ListControlPlaneCPUSeconds, res.ListClientCPUSeconds = cpu[order[1]][0], cpu[order[1]][1]
	res.ListWidgetsSeconds = median[scan.ResourceString(widget.resource())]
	v1beta1, _, err := listTimes(ctx, cl.dyn, []schema.GroupVersionResource{widgetsV1beta1})
	if err != nil {
		return err
	}
	res.ListByResource[scan.ResourceString(widgetsV1beta1)+" (not in list)"] = v1beta1[scan.ResourceString(widgetsV1beta1)]
	return nil
}

func runMain(ctx context.Context, c config, res *Result) error {
	cl, err := prepare(ctx, c, c.objects, res)
	if err != nil {
		return err
	}
	defer cl.stop()
	for _, o := range cl.objects {
		res.Kinds = addKind(res.Kinds, o.kind.String())
	}
	want, violating := cl.model.expected(cl.objects)
	res.Expected, res.ViolatingObjects = want, violating

	logf("timing the bare LIST")
	if err := measureList(ctx, cl, res); err != nil {
		return err
	}
	logf("list: %.2fs for %d objects (runs %v)", res.ListSeconds, res.ListObjects, res.ListRuns)
	if err := measureBackground(ctx, cl, res); err != nil {
		return err
	}
	op, err := measureFirstAudit(ctx, c, cl, res)
	if op != nil {
		defer op.stop()
	}
	if err != nil {
		return err
	}
	if err := measureIdle(ctx, c, cl, res); err != nil {
		return err
	}
	if err := measureChanges(ctx, c, cl, res, op); err != nil {
		return err
	}
	return measureEnd(ctx, c, cl, res, op)
}

// measureBackground counts the requests of clients other than the API server itself, with nobody running:
// the subtraction leaves none.
func measureBackground(ctx context.Context, cl *cluster, res *Result) error {
	b0, err := cl.metrics.scrape(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	time.Sleep(10 * time.Second)
	b1, err := cl.metrics.scrape(ctx)
	if err != nil {
		return err
	}
	cl.mark(phaseBackground, start)
	res.Requests = map[string]requests{}
	res.Requests[phaseBackground] = delta(b0, b1)
	res.Phases = []string{phaseBackground, phaseFirstAudit, phaseIdle}
	return nil
}

// measureFirstAudit starts the operator and measures its first audit: until the reports reflect every object
// (and the AuditPolicies' statuses the model), its CPU, the control plane's and the requests made. It returns
// the operator once started, for the caller to stop, also with an error.
func measureFirstAudit(ctx context.Context, c config, cl *cluster, res *Result) (*operator, error) {
	m0, err := cl.metrics.scrape(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	cpMeter := startCPU()
	op, err := startAuditor(c, cl)
	if err != nil {
		return nil, err
	}
	// The CPU used until readiness (every object evaluated) against after it (the reports written) tells
	// which program bounds each phase of the first audit.
	var readyOpCPU, readyCPCPU time.Duration
	ready, readyAt := op.readyPoller(ctx, func() {
		readyOpCPU, _ = op.cpu()
		readyCPCPU = controlPlaneCPU() - cpMeter.cp
	})
	logf("operator started (pid %d, log %s)", op.cmd.Process.Pid, op.log.Name())
	last, got, matched := cl.reports.waitSettled(ctx, func() bool { return ready() && op.running() == nil }, res.Expected, 3*time.Second, c.auditTimeout)
	if err := op.running(); err != nil {
		return op, err
	}
	res.FirstAuditSeconds = last.Sub(op.started).Seconds()
	res.Summaries, res.SummariesMatch = got, matched
	if cpu, err := op.cpu(); err == nil {
		res.FirstAuditCPUSeconds = cpu.Seconds()
	}
	res.FirstAuditControlPlaneCPUSeconds, _ = cpMeter.stop()
	if at := readyAt(); !at.IsZero() {
		res.ReadySeconds = at.Sub(op.started).Seconds()
		res.ReadyCPUSeconds, res.ReadyControlPlaneCPUSeconds = readyOpCPU.Seconds(), readyCPCPU.Seconds()
	}
	if res.AfterFirstAudit, err = op.memory(); err != nil {
		return op, err
	}
	res.ReportsAfterFirstAudit.Count, res.ReportsAfterFirstAudit.Bytes, res.ReportsAfterFirstAudit.Listed = cl.reports.size()
	if e, err := cl.etcdBytes(ctx, reportAPI(c)); err == nil {
		res.EtcdAfterFirstAudit = &e
	} else {
		res.Errors = append(res.Errors, err.Error())
	}
	// The statuses are part of the first audit's writes: the idle window starts once they are settled.
	checkStatuses(ctx, c, cl, res, "after the first audit", op.started, &res.StatusAfterFirstAudit)
	m1, err := cl.metrics.scrape(ctx)
	if err != nil {
		return op, err
	}
	cl.mark(phaseFirstAudit, start)
	res.Requests[phaseFirstAudit] = delta(m0, m1)
	op.profileSegment(c)
	logf("first audit: %.2fs (ready %.2fs), summaries %+v, match %v", res.FirstAuditSeconds, res.ReadySeconds, got, matched)
	if !matched {
		return op, fmt.Errorf("the reports never reflected every object: summed summaries %+v, want %+v", got, res.Expected)
	}
	return op, nil
}

// startAuditor starts the operator on cl: the profiling build with -profile (segment 1 of its profiles is the
// first audit; 2 the Deployment updates; 3 the ConfigMap updates).
func startAuditor(c config, cl *cluster) (*operator, error) {
	bin, args := c.bin, operatorArgs(c)
	if c.profile != "" {
		bin = filepath.Join(c.workdir, "celaudit-profiled")
		args = append(args, "--cpuprofile="+filepath.Join(c.profile, fmt.Sprintf("cpu-%d", c.objects)),
			"--heapprofile="+filepath.Join(c.profile, fmt.Sprintf("heap-%d", c.objects)))
	}
	return startOperator(bin, cl.kubeconfig, filepath.Join(c.workdir, fmt.Sprintf("operator-%d.log", c.objects)), args, strings.Fields(c.operatorEnv))
}

// profileSegment ends a segment of the profiling build's profiles; nothing without -profile.
func (o *operator) profileSegment(c config) {
	if c.profile != "" {
		_ = o.cmd.Process.Signal(syscall.SIGUSR1)
	}
}

// checkStatuses waits until the AuditPolicies' statuses equal the model, or the status timeout passes, and
// records the comparison in *into (at is the moment named "when" that the wait measures from); a mismatch
// is one of the run's errors. Nothing without AuditPolicies.
func checkStatuses(ctx context.Context, c config, cl *cluster, res *Result, when string, at time.Time, into **StatusCheck) {
	if cl.aps == nil {
		return
	}
	check := cl.aps.waitStatuses(ctx, cl.model.statuses(cl.objects), at, 3*time.Second, c.statusTimeout)
	*into = &check
	logf("AuditPolicy statuses %s: match %v, last change after %.2fs %v", when, check.Matched, check.Seconds, check.Mismatches)
	if !check.Matched {
		res.Errors = append(res.Errors, fmt.Sprintf("AuditPolicy statuses %s differ from the model: %s", when, strings.Join(check.Mismatches, "; ")))
	}
}

// measureIdle counts the report and AuditPolicy events and the requests of an idle window.
func measureIdle(ctx context.Context, c config, cl *cluster, res *Result) error {
	logf("idle for %s", c.idle)
	_, _, eventsBefore := cl.reports.snapshot()
	statusEventsBefore := cl.auditPolicyEvents()
	i0, err := cl.metrics.scrape(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.idle):
	}
	i1, err := cl.metrics.scrape(ctx)
	if err != nil {
		return err
	}
	_, _, eventsAfter := cl.reports.snapshot()
	cl.mark(phaseIdle, start)
	res.Requests[phaseIdle] = delta(i0, i1)
	res.IdleReportEvents = eventsAfter - eventsBefore
	res.IdleAuditPolicyEvents = cl.auditPolicyEvents() - statusEventsBefore
	logf("idle: %d report events, %d report writes, %d LISTs, %d AuditPolicy events, %d AuditPolicy writes", res.IdleReportEvents,
		res.Requests[phaseIdle].sum(writeVerbs, isReport), res.Requests[phaseIdle].sum([]string{"LIST"}, nil),
		res.IdleAuditPolicyEvents, res.Requests[phaseIdle].sum(writeVerbs, isAuditPolicy))
	return nil
}

// measureChanges measures change-to-report latency, for Deployments (a policy whose param kind is a CRD) and
// ConfigMaps (a policy whose param kind is ConfigMap, the kind being changed), then a policy edit.
func measureChanges(ctx context.Context, c config, cl *cluster, res *Result, op *operator) error {
	for _, k := range []kind{deployment, configMap} {
		op.profileSegment(c)
		err := measureFlips(ctx, c, cl, res, k, op.cpu)
		op.profileSegment(c)
		if err != nil {
			return err
		}
	}
	return measureEdit(ctx, cl, res)
}

// measureEnd checks the AuditPolicies' statuses after the updates and the edit, and records the operator's
// total CPU and memory, the reports' size, the bytes per object and the operator's own requests.
func measureEnd(ctx context.Context, c config, cl *cluster, res *Result, op *operator) error {
	// After the updates and the edit: the statuses follow the objects the updates changed.
	checkStatuses(ctx, c, cl, res, "at the end", time.Now(), &res.StatusEnd)
	if err := op.running(); err != nil {
		return err
	}
	if cpu, err := op.cpu(); err == nil {
		res.TotalCPUSeconds = cpu.Seconds()
	}
	var err error
	if res.End, err = op.memory(); err != nil {
		return err
	}
	res.ControlPlaneEnd = controlPlaneMemory()
	res.ReportsEnd.Count, res.ReportsEnd.Bytes, res.ReportsEnd.Listed = cl.reports.size()
	if e, err := cl.etcdBytes(ctx, reportAPI(c)); err == nil {
		res.EtcdEnd = &e
	} else {
		res.Errors = append(res.Errors, err.Error())
	}
	if c.objects > 0 && res.Baseline.HWM > 0 {
		res.BytesPerObject = float64(res.End.HWM-res.Baseline.HWM) / float64(c.objects)
		res.BytesPerObjectAfterFirstAudit = float64(res.AfterFirstAudit.HWM-res.Baseline.HWM) / float64(c.objects)
	}
	time.Sleep(time.Second) // let the API server write its last audit events
	if res.OperatorRequests, err = operatorRequests(cl.auditLog, cl.windows); err != nil {
		return fmt.Errorf("reading the audit log: %w", err)
	}
	for _, e := range cl.reports.errors() {
		res.Errors = append(res.Errors, e.Error())
	}
	if cl.aps != nil {
		for _, e := range cl.aps.errors() {
			res.Errors = append(res.Errors, e.Error())
		}
	}
	return nil
}

// auditPolicyEvents returns the number of AuditPolicy events seen so far; 0 without AuditPolicies.
func (cl *cluster) auditPolicyEvents() int {
	if cl.aps == nil {
		return 0
	}
	_, _, n := cl.aps.snapshot()
	return n
}

func addKind(m map[string]int, k string) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	m[k]++
	return m
}

// flip is one update of the change-to-report phase.
type flip struct {
	obj        *object
	wantListed bool
	patch      []byte
	resp       time.Time
	seen       time.Time // first report event showing the new state
	err        error
}

// flipper says how updates of one kind move objects between compliant and violating, under a policy whose
// bindings are [Warn, Audit] or [Audit] so that the API server admits both states.
type flipper struct {
	policy    string
	candidate func(*object) bool
	// apply changes the model and returns the merge patch and whether the object is now listed.
	apply func(*object) ([]byte, bool)
}

var flippers = map[kind]flipper{
	configMap: {
		policy:    cmSizePolicy,
		candidate: func(o *object) bool { return o.violation == none || o.violation == vCMSize },
		apply: func(o *object) ([]byte, bool) {
			if o.cmSize > paramCMMax {
				o.cmSize = 2
			} else {
				o.cmSize = 99
			}
			return []byte(fmt.Sprintf(`{"data":{"size":"%d"}}`, o.cmSize)), o.cmSize > paramCMMax
		},
	},
	deployment: {
		policy:    labelsPolicy,
		candidate: func(o *object) bool { return o.violation == none || o.violation == vDeployLabels },
		apply: func(o *object) ([]byte, bool) {
			o.noApp = !o.noApp
			if o.noApp {
				return []byte(`{"metadata":{"labels":{"app":null}}}`), true
			}
			return []byte(fmt.Sprintf(`{"metadata":{"labels":{"app":%q}}}`, o.name())), false
		},
	},
}

// measureFlips updates objects of kind k at the flip rate, each update moving the object between compliant
// and violating, and times the report event that shows each new state.
func measureFlips(ctx context.Context, c config, cl *cluster, res *Result, k kind, opCPU func() (time.Duration, error)) error {
	fl := flippers[k]
	var candidates []*object
	for _, o := range cl.objects {
		if o.kind == k && fl.candidate(o) && len(candidates) < c.flips {
			candidates = append(candidates, o)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	phase := fmt.Sprintf("%d %s updates", len(candidates), k)
	logf("change-to-report: %s at %.0f/s", phase, c.flipRate)
	t := newFlipTracker(cl.reports, fl.policy, k)
	defer t.stop()

	f0, err := cl.metrics.scrape(ctx)
	if err != nil {
		return err
	}
	windowStart := time.Now()
	meter := startCPU()
	op0, _ := opCPU()
	flips, rate := sendFlips(ctx, cl.client, k, fl, candidates, c.flipRate, t)
	out := FlipResult{Kind: k.String(), Policy: fl.policy, Count: len(flips), AchievedRate: rate}
	t.wait(2 * time.Minute)
	out.WindowSeconds = time.Since(windowStart).Seconds()
	out.ControlPlaneCPU, out.HarnessCPU = meter.stop()
	if op1, err := opCPU(); err == nil {
		out.OperatorCPU = (op1 - op0).Seconds()
	}
	want, _ := cl.model.expected(cl.objects)
	_, got, matched := cl.reports.waitSettled(ctx, func() bool { return true }, want, 3*time.Second, 2*time.Minute)
	out.SummariesMatch = matched
	f1, err := cl.metrics.scrape(ctx)
	if err != nil {
		return err
	}
	patched := "PATCH configmaps"
	if k == deployment {
		patched = "PATCH apps/deployments"
	}
	cl.mark(phase, windowStart)
	res.Requests[phase] = delta(f0, f1).minus(map[string]float64{patched: float64(len(flips))})
	res.Phases = append(res.Phases, phase)
	t.latencies(flips, &out)
	res.Flips = append(res.Flips, out)
	logf("change-to-report %s: p50 %.3fs p99 %.3fs max %.3fs, %d unseen, %d failed, summaries match %v (%+v)",
		k, out.P50, out.P99, out.Max, out.Unseen, out.Failed, matched, got)
	return nil
}

// flipTracker follows the report events until each flip's new state shows in its namespace's reports.
type flipTracker struct {
	mu      sync.Mutex
	pending map[string][]*flip // namespace -> flips not yet seen
	active  bool
}

// newFlipTracker returns a tracker of the flips of kind k under policy, told of every report event.
func newFlipTracker(r *reports, policy string, k kind) *flipTracker {
	t := &flipTracker{pending: map[string][]*flip{}, active: true}
	r.onEvent(func(ns string, at time.Time) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.active {
			return
		}
		rest := t.pending[ns][:0]
		for _, f := range t.pending[ns] {
			listed := r.listed(ns, listedKey{policy: policy, kind: k.String(), name: f.obj.name()}) != ""
			if listed == f.wantListed {
				f.seen = at
				continue
			}
			rest = append(rest, f)
		}
		t.pending[ns] = rest
	})
	return t
}

// stop ignores the report events that follow.
func (t *flipTracker) stop() {
	t.mu.Lock()
	t.active = false
	t.mu.Unlock()
}

// add waits for the new state of f to show.
func (t *flipTracker) add(f *flip) {
	t.mu.Lock()
	t.pending[nsName(f.obj.ns)] = append(t.pending[nsName(f.obj.ns)], f)
	t.mu.Unlock()
}

// wait waits until every flip has shown, or timeout has passed.
func (t *flipTracker) wait(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		t.mu.Lock()
		left := 0
		for _, fs := range t.pending {
			left += len(fs)
		}
		t.mu.Unlock()
		if left == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sendFlips patches each candidate at rate per second, each patch flipping its compliance, and returns the
// flips once every patch is answered, and the rate achieved.
func sendFlips(ctx context.Context, c client.Client, k kind, fl flipper, candidates []*object, rate float64, t *flipTracker) ([]*flip, float64) {
	flips := make([]*flip, 0, len(candidates))
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	var wg sync.WaitGroup
	start := time.Now()
	for _, o := range candidates {
		<-tick.C
		f := &flip{obj: o}
		f.patch, f.wantListed = fl.apply(o)
		flips = append(flips, f)
		t.add(f)
		var target client.Object = &corev1.ConfigMap{}
		if k == deployment {
			target = &appsv1.Deployment{}
		}
		target.SetNamespace(nsName(o.ns))
		target.SetName(o.name())
		wg.Go(func() {
			err := c.Patch(ctx, target, client.RawPatch(types.MergePatchType, f.patch))
			t.mu.Lock()
			f.resp, f.err = time.Now(), err
			t.mu.Unlock()
		})
	}
	tick.Stop()
	wg.Wait()
	return flips, float64(len(flips)) / time.Since(start).Seconds()
}

// latencies records in out the failed and unseen flips and the quantiles of the others' latency, from the
// patch's answer to the report event showing it.
func (t *flipTracker) latencies(flips []*flip, out *FlipResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lat []float64
	for _, f := range flips {
		switch {
		case f.err != nil:
			out.Failed++
			if len(out.FailedSample) < 3 {
				out.FailedSample = append(out.FailedSample, f.err.Error())
			}
		case f.seen.IsZero():
			out.Unseen++
		default:
			lat = append(lat, max(0, f.seen.Sub(f.resp).Seconds()))
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		out.P50 = quantile(lat, 0.50)
		out.P99 = quantile(lat, 0.99)
		out.Max = lat[len(lat)-1]
	}
	out.Measured = len(lat)
}

// quantile returns the q-quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// measureEdit widens the widget color policy's expression (purple becomes allowed) and times until every
// report shows it.
func measureEdit(ctx context.Context, cl *cluster, res *Result) error {
	e0, err := cl.metrics.scrape(ctx)
	if err != nil {
		return err
	}
	windowStart := time.Now()
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := cl.client.Get(ctx, client.ObjectKey{Name: colorPolicy}, p); err != nil {
		return err
	}
	p.Spec.Validations[0].Expression = colorExpression(true)
	if err := cl.client.Update(ctx, p); err != nil {
		return fmt.Errorf("editing %s: %w", colorPolicy, err)
	}
	edited := time.Now()
	cl.model.purpleAllowed = true
	want, _ := cl.model.expected(cl.objects)
	for _, o := range cl.objects {
		if o.violation == vWidgetColor {
			res.Edit.ChangedResults++
		}
	}
	last, got, matched := cl.reports.waitSettled(ctx, func() bool {
		_, l, _ := cl.reports.snapshot()
		return l.After(edited)
	}, want, 3*time.Second, 10*time.Minute)
	res.Edit.Matched = matched
	res.Edit.Seconds = last.Sub(edited).Seconds()
	if res.ListWidgetsSeconds > 0 {
		res.Edit.Ratio = res.Edit.Seconds / res.ListWidgetsSeconds
	}
	e1, err := cl.metrics.scrape(ctx)
	if err != nil {
		return err
	}
	cl.mark(phaseEdit, windowStart)
	res.Phases = append(res.Phases, phaseEdit)
	res.Requests[phaseEdit] = delta(e0, e1).minus(map[string]float64{
		"GET admissionregistration.k8s.io/validatingadmissionpolicies": 1,
		"PUT admissionregistration.k8s.io/validatingadmissionpolicies": 1,
	})
	logf("policy edit: %.2fs (%.1fx the widgets list), match %v (%+v)", res.Edit.Seconds, res.Edit.Ratio, matched, got)
	return nil
}
