// Command demo runs celaudit's main job on a local control plane: it starts kube-apiserver and etcd, stores
// objects, tightens the rules that govern them, runs the operator and prints the PolicyReports it writes.
// It keeps the control plane up until interrupted, so the reports can be explored with kubectl.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	auditv1alpha1 "github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/internal/cli"
	"github.com/celaudit/celaudit/test/envtestutil"
)

var (
	//go:embed testdata/widget-crd.yaml
	widgetCRD []byte
	//go:embed testdata/widget-crd-tightened.yaml
	widgetCRDTightened []byte
	//go:embed testdata/widgets.yaml
	widgets []byte
	//go:embed testdata/rollout.yaml
	deployments []byte
	//go:embed testdata/rollout-policy.yaml
	rolloutPolicy []byte
	//go:embed testdata/auditpolicy.yaml
	auditPolicy []byte
	//go:embed testdata/mutating-policy.yaml
	mutatingPolicy []byte
)

func main() {
	exitAfter := flag.Duration("exit-after", 0, "Stop after this long instead of waiting for Ctrl-C (0 waits).")
	flag.Parse()
	// Only errors from the operator: its progress is what the demo prints.
	logger := zap.New(zap.Level(zapcore.ErrorLevel))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger.WithName("upstream"))

	restore := takeTerminal()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *exitAfter)
	interrupted := ctx.Err() != nil
	stop()
	restore()
	if err != nil && !interrupted {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
	// Ctrl-C (or SIGTERM) is the way to end the demo, at whatever step: what it cut short did not fail.
	if interrupted {
		fmt.Println("Interrupted: the demo is over.")
	}
}

func run(ctx context.Context, exitAfter time.Duration) error {
	step("Starting kube-apiserver and etcd")
	env, err := envtestutil.Start()
	if err != nil {
		return err
	}
	defer func() {
		step("Stopping the control plane")
		_ = env.Stop()
	}()
	kubeconfig, err := writeKubeconfig(env.Environment)
	if err != nil {
		return err
	}
	d := demo{c: env.Client, kubectl: filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), kubeconfig: kubeconfig}
	if err := d.storeAndTighten(ctx); err != nil {
		return err
	}
	// celaudit runs as the ServiceAccount config/default installs, with exactly the access an install grants:
	// the demo's kubectl, the control plane's admin, is then a user like any other, whose writes the pair
	// celaudit registers judges.
	id, err := env.Install(ctx)
	if err != nil {
		return err
	}
	stopOperator, err := d.audit(ctx, id)
	if err != nil {
		return err
	}
	defer stopOperator()
	if err := d.dryRun(ctx); err != nil {
		return err
	}
	if err := d.enforce(ctx); err != nil {
		return err
	}
	if err := d.drift(ctx); err != nil {
		return err
	}
	d.keepRunning(ctx, exitAfter)
	return nil
}

// demo is the local control plane the demo acts on: a client of it, and kubectl with a kubeconfig for it.
type demo struct {
	c                   client.Client
	kubectl, kubeconfig string
}

// storeAndTighten stores objects under lax rules, rolls out a policy in Warn, asks whatif what tightening would
// reject, and tightens the CRD: the API server never looks at the objects already stored.
func (d demo) storeAndTighten(ctx context.Context) error {
	step("Installing the Widget CRD (no validation rules yet) and storing five widgets")
	if err := applyYAML(ctx, d.c, widgetCRD, widgets); err != nil {
		return err
	}
	d.show(ctx, "get", "widgets", "-A", "-o", "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,REPLICAS:.spec.replicas,MIN:.spec.minReplicas,MAX:.spec.maxReplicas,IMAGE:.spec.image,TIER:.spec.tier")

	step("Storing three Deployments, then rolling out a ValidatingAdmissionPolicy bound with [Warn, Audit]")
	if err := applyYAML(ctx, d.c, deployments, rolloutPolicy); err != nil {
		return err
	}
	fmt.Println("New writes now only get warnings; the Deployments already stored are never checked by the API server.")

	step("Before tightening: what would the stricter CRD and a Deny binding reject among the stored objects?")
	d.plugin("whatif", "-f", filepath.Join(envtestutil.RepoRoot(), "test", "demo", "testdata", "widget-crd-tightened.yaml"))
	d.plugin("whatif", "--binding", "deployment-best-practices", "--actions", "Deny")

	step("Tightening the CRD: a replica-range rule, an image rule, maximum: 50 and an enum on tier")
	if err := applyYAML(ctx, d.c, widgetCRDTightened); err != nil {
		return err
	}
	fmt.Println("The API server accepts the change; the widgets already stored are not re-validated.")
	return nil
}

// audit starts celaudit against cfg, waits for its first audit's reports and shows them; the function it
// returns stops celaudit.
func (d demo) audit(ctx context.Context, id envtestutil.Identity) (stop func(), err error) {
	step(fmt.Sprintf("Starting celaudit as %s", id))
	opts := controllers.DefaultOptions()
	opts.MetricsAddr, opts.ProbeAddr = "0", "0"
	opts.ManageAdmissionPolicies = true
	opts.ReadinessInterval = time.Second
	op, err := controllers.NewOperator(id.Config, opts)
	if err != nil {
		return nil, err
	}
	opCtx, stopOp := context.WithCancel(ctx)
	opDone := make(chan error, 1)
	go func() { opDone <- op.Start(opCtx) }()
	stop = func() {
		stopOp()
		if err := <-opDone; err != nil {
			fmt.Fprintln(os.Stderr, "operator stopped with an error:", err)
		}
	}
	start := time.Now()
	done, err := waitForReports(ctx, d.c, op)
	if err != nil {
		stop()
		return nil, err
	}
	fmt.Printf("First audit complete and reports written in %s.\n", done.Sub(start).Round(100*time.Millisecond))

	step("kubectl get policyreports -A")
	d.show(ctx, "get", "policyreports", "-A")
	step("kubectl get policyreport -n team-a celaudit -o yaml")
	d.show(ctx, "get", "policyreport", "-n", "team-a", "celaudit", "-o", "yaml")
	step("The rollout at a glance: what a Deny binding would reject today")
	d.show(ctx, "get", "policyreports", "-A", "-o",
		`jsonpath={range .items[*]}{range .results[?(@.policy=="deployment-best-practices")]}{.result}{"\t"}{.resources[0].namespace}/{.resources[0].name}{"\t"}{.message}{"\n"}{end}{end}`)

	step("Per policy, what the reports hold and whether it is safe to enforce")
	d.plugin("summary")
	return stop, nil
}

// dryRun creates an AuditPolicy in Audit and shows its status once audited.
func (d demo) dryRun(ctx context.Context) error {
	step("Dry-run tightening: an AuditPolicy in Audit judges the Deployments' pod templates as the Pods they would create")
	if err := applyYAML(ctx, d.c, auditPolicy); err != nil {
		return err
	}
	if err := waitForAuditPolicy(ctx, d.c, "pod-memory-limits", func(ap *auditv1alpha1.AuditPolicy) bool {
		return ap.Status.LastAuditTime != nil
	}); err != nil {
		return err
	}
	d.show(ctx, "get", "auditpolicies")
	d.show(ctx, "get", "auditpolicy", "pod-memory-limits", "-o",
		`jsonpath={range .status.conditions[*]}{.type}={.status}: {.message}{"\n"}{end}`)
	return nil
}

// enforce switches the AuditPolicy to Deny, shows the gate refusing it while stored objects violate it, registers
// it with an explicit override, shows the API server enforcing the pair celaudit registers, and exports that pair.
func (d demo) enforce(ctx context.Context) error {
	step("Switching it to Deny while stored Deployments violate it: celaudit refuses to register it")
	d.show(ctx, "patch", "auditpolicy", "pod-memory-limits", "--type=merge", "-p", `{"spec":{"enforcement":"Deny"}}`)
	if err := waitForAuditPolicy(ctx, d.c, "pod-memory-limits", func(ap *auditv1alpha1.AuditPolicy) bool {
		// Refused once its audit of the new generation found the violations, not only while it is pending.
		enforced := meta.FindStatusCondition(ap.Status.Conditions, auditv1alpha1.ConditionEnforced)
		safe := meta.FindStatusCondition(ap.Status.Conditions, auditv1alpha1.ConditionSafeToEnforce)
		return enforced != nil && enforced.Reason == controllers.ReasonNotSafeToEnforce && enforced.ObservedGeneration == ap.Generation &&
			safe != nil && safe.Status == metav1.ConditionFalse && safe.ObservedGeneration == ap.Generation
	}); err != nil {
		return err
	}
	d.show(ctx, "get", "auditpolicy", "pod-memory-limits", "-o",
		`jsonpath={range .status.conditions[*]}{.type}={.status} ({.reason}): {.message}{"\n"}{end}`)

	step("Enforcing it anyway, as an explicit and recorded decision: spec.enforcementOverride")
	d.show(ctx, "patch", "auditpolicy", "pod-memory-limits", "--type=merge", "-p",
		`{"spec":{"enforcementOverride":{"reason":"the two teams were told; new Pods must set limits"}}}`)
	if err := waitForAuditPolicy(ctx, d.c, "pod-memory-limits", func(ap *auditv1alpha1.AuditPolicy) bool {
		return meta.IsStatusConditionTrue(ap.Status.Conditions, auditv1alpha1.ConditionEnforced)
	}); err != nil {
		return err
	}
	d.show(ctx, "get", "validatingadmissionpolicies,validatingadmissionpolicybindings", "-l", "audit.celaudit.io/auditpolicy=pod-memory-limits")
	// The API server loads a new policy within a second or so.
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "team-a"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "nginx"}}}}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := d.c.Create(ctx, probe.DeepCopy(), client.DryRunAll); err != nil {
			break
		}
	}
	fmt.Println("$ kubectl run probe --image=nginx -n team-a --dry-run=server")
	d.show(ctx, "run", "probe", "--image=nginx", "-n", "team-a", "--dry-run=server")

	step("The pair to commit to a GitOps repository in the AuditPolicy's place")
	d.plugin("export", "auditpolicy", "pod-memory-limits")
	return nil
}

// drift asks whatif what a new MutatingAdmissionPolicy would change in the stored Deployments, rolls it out,
// and shows the drift celaudit reports: the API server applies the policy to writes only.
func (d demo) drift(ctx context.Context) error {
	step("Mutation drift: which stored Deployments would a new MutatingAdmissionPolicy change, and how?")
	d.plugin("whatif", "-f", filepath.Join(envtestutil.RepoRoot(), "test", "demo", "testdata", "mutating-policy.yaml"), "--diff")

	step("Rolling it out: the stored Deployments keep their shape until their next update; celaudit reports the drift")
	if err := applyYAML(ctx, d.c, mutatingPolicy); err != nil {
		return err
	}
	if err := waitForResults(ctx, d.c, "pods-run-as-non-root", 2); err != nil {
		return err
	}
	d.show(ctx, "get", "policyreports", "-A", "-o",
		`jsonpath={range .items[*]}{range .results[?(@.policy=="pods-run-as-non-root")]}{.result}{"\t"}{.resources[0].namespace}/{.resources[0].name}{"\t"}{.message}{"\t"}{.properties.patch}{"\n"}{end}{end}`)
	d.plugin("summary")
	return nil
}

// waitForResults waits until the PolicyReports list n results of policy.
func waitForResults(ctx context.Context, c client.Client, policy string, n int) error {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		list := &v1alpha2.PolicyReportList{}
		if err := c.List(ctx, list); err != nil {
			return fmt.Errorf("listing reports: %w", err)
		}
		found := 0
		for _, r := range list.Items {
			for _, res := range r.Results {
				if res.Policy == policy {
					found++
				}
			}
		}
		if found >= n {
			return nil
		}
	}
	return fmt.Errorf("the reports did not list %d results of %s within a minute", n, policy)
}

// keepRunning keeps the control plane up for exploring, until ctx ends or, when set, exitAfter has passed.
func (d demo) keepRunning(ctx context.Context, exitAfter time.Duration) {
	step("The control plane keeps running")
	fmt.Printf("Explore it with:\n  export KUBECONFIG=%s\n  %s get policyreports -A\n", d.kubeconfig, d.kubectl)
	fmt.Println("Press Ctrl-C to stop and clean up.")
	if exitAfter > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(exitAfter):
		}
	} else {
		<-ctx.Done()
	}
}

func step(s string) { fmt.Printf("\n==> %s\n", s) }

// waitForAuditPolicy waits until the AuditPolicy named name satisfies done.
func waitForAuditPolicy(ctx context.Context, c client.Client, name string, done func(*auditv1alpha1.AuditPolicy) bool) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ap := &auditv1alpha1.AuditPolicy{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ap); err != nil {
			return fmt.Errorf("reading AuditPolicy %s: %w", name, err)
		}
		if done(ap) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("AuditPolicy %s did not reach the expected state within a minute", name)
}

func applyYAML(ctx context.Context, c client.Client, docs ...[]byte) error {
	for _, d := range docs {
		objs, err := envtestutil.DecodeYAML(d)
		if err != nil {
			return err
		}
		if err := envtestutil.Apply(ctx, c, objs...); err != nil {
			return err
		}
	}
	return nil
}

// waitForReports waits until the operator has settled and the reports have stopped changing, and returns
// when they last changed.
func waitForReports(ctx context.Context, c client.Client, op *controllers.Operator) (time.Time, error) {
	deadline := time.Now().Add(2 * time.Minute)
	last, changed := "", time.Now()
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return changed, err
		}
		time.Sleep(100 * time.Millisecond)
		if !op.Settled() {
			continue
		}
		list := &v1alpha2.PolicyReportList{}
		if err := c.List(ctx, list); err != nil {
			return changed, fmt.Errorf("listing reports: %w", err)
		}
		sig := ""
		for _, r := range list.Items {
			sig += fmt.Sprintf("%s/%s@%s;", r.Namespace, r.Name, r.ResourceVersion)
		}
		if sig != last {
			last, changed = sig, time.Now()
			continue
		}
		if sig != "" && time.Since(changed) > 2*time.Second {
			return changed, nil
		}
	}
	return changed, errors.New("reports did not settle within 2 minutes")
}

func writeKubeconfig(env *envtest.Environment) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("creating demo user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("building kubeconfig: %w", err)
	}
	dir := filepath.Join(os.TempDir(), "celaudit-demo")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("writing kubeconfig: %w", err)
	}
	return path, nil
}

// plugin runs kubectl-celaudit in process, as `kubectl celaudit args...` would, and prints its output.
func (d demo) plugin(args ...string) {
	fmt.Printf("$ kubectl celaudit %s\n", strings.Join(args, " "))
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: os.Stdout, ErrOut: os.Stderr}
	if code := cli.Run(streams, append(args, "--kubeconfig", d.kubeconfig)); code != int(cli.ExitOK) && code != int(cli.ExitViolations) {
		fmt.Fprintf(os.Stderr, "kubectl celaudit %v: exit %d\n", args, code)
	}
}

// show runs kubectl args and prints its output.
func (d demo) show(ctx context.Context, args ...string) {
	cmd := exec.CommandContext(ctx, d.kubectl, append([]string{"--kubeconfig", d.kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "kubectl %v: %v\n", args, err)
	}
}
