package failover

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// namespaces are the scenarios' audited namespaces.
var namespaces = []string{"fo-a", "fo-b"}

// policy is the AuditPolicy of the scenarios: the ConfigMaps of namespaces labelled failover=yes need an
// owner key.
const policy = "fo-owner"

// cluster is a control plane holding the scenario's fixtures, and celaudit's shipped identity.
type cluster struct {
	env *envtestutil.Env
	id  envtestutil.Identity
}

// newCluster starts a control plane of the test's own (the Lease and the policies are the test's alone) with
// the AuditPolicy and one passing ConfigMap in each namespace.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{env: envtestutil.StartForTest(t)}
	c.id = c.env.ShippedIdentity(t)
	for _, ns := range namespaces {
		c.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"failover": "yes"}}})
		c.create(t, configMap(ns, "owned", map[string]string{"owner": "team"}))
	}
	c.create(t, &v1alpha1.AuditPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policy},
		Spec: v1alpha1.AuditPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations:    []admissionregistrationv1.Validation{{Expression: "has(object.data) && 'owner' in object.data", Message: "needs an owner"}},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"failover": "yes"}}},
			Enforcement:    v1alpha1.Audit,
		},
	})
	return c
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func (c *cluster) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := c.env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// waitResult waits until a report of namespace ns lists result for the ConfigMap name.
func (c *cluster) waitResult(t *testing.T, ns, name string, result v1alpha2.PolicyResult) {
	t.Helper()
	envtestutil.Eventually(t, 2*time.Minute, func() error {
		var reports v1alpha2.PolicyReportList
		if err := c.env.Client.List(context.Background(), &reports, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, r := range reports.Items {
			for _, res := range r.Results {
				if res.Policy == policy && len(res.Resources) == 1 && res.Resources[0].Name == name && res.Result == result {
					return nil
				}
			}
		}
		lines, err := envtestutil.ReportResults(context.Background(), c.env.Client, ns)
		if err != nil {
			return err
		}
		return fmt.Errorf("no %s result for ConfigMap %s/%s in the reports, which hold %q", result, ns, name, lines)
	})
}

// waitFirstAudit waits until the leader's first audit is written: both ConfigMaps pass in the reports, and the
// AuditPolicy is SafeToEnforce.
func (c *cluster) waitFirstAudit(t *testing.T) {
	t.Helper()
	for _, ns := range namespaces {
		c.waitResult(t, ns, "owned", v1alpha2.StatusPass)
	}
	envtestutil.Eventually(t, time.Minute, func() error {
		ap := &v1alpha1.AuditPolicy{}
		if err := c.env.Client.Get(context.Background(), client.ObjectKey{Name: policy}, ap); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(ap.Status.Conditions, v1alpha1.ConditionSafeToEnforce); cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("AuditPolicy %s is not SafeToEnforce: %+v", policy, ap.Status)
		}
		return nil
	})
}

// assertFresh ends a scenario: the reports equal, result by result, those of a fresh audit.
func (c *cluster) assertFresh(t *testing.T) {
	t.Helper()
	opts := envtestutil.TestOptions()
	opts.ReportVerdicts = "pass,fail,warn,error,skip"
	envtestutil.AssertFreshAuditAgrees(t, c.env.Client, c.id.Config, opts, namespaces...)
}

// wroteReports fails unless r's proxy saw at least one accepted write of a PolicyReport in ns: a replica
// that never writes would pass the single-writer check for nothing.
func wroteReports(t *testing.T, r *replica, ns string) {
	t.Helper()
	if len(r.recorded(func(c call) bool { return c.write() && c.ok() && c.Resource == "policyreports" && c.Namespace == ns })) == 0 {
		t.Fatalf("replica %s wrote no PolicyReport in %s", r.name, ns)
	}
}

// stop stops r gracefully, as a rolling update or a scale-down does, and checks it exits cleanly.
func stop(t *testing.T, r *replica) {
	t.Helper()
	r.signal(t, syscall.SIGTERM)
	if code := r.waitExit(t, time.Minute); code != 0 {
		t.Errorf("replica %s exited with %d after SIGTERM, want 0", r.name, code)
	}
}

// failoverBound is the longest a standby may take to acquire the lease after the leader's last renewal: the
// lease duration, plus a retry of the standby (jittered) on each side, plus slack for a loaded machine.
const failoverBound = leaseDuration + 2*time.Duration(1.2*float64(retryPeriod)) + 2*time.Second

// TestLeaderKilled kills the leader with SIGKILL: the standby takes over within the lease duration and writes
// the change made meanwhile within one audit more.
func TestLeaderKilled(t *testing.T) {
	c := newCluster(t)
	a := startReplica(t, c.env, c.id, "a")
	aHeld := a.waitLeader(t, time.Minute)
	c.waitFirstAudit(t)
	oneAudit := time.Since(aHeld.from)
	b := startReplica(t, c.env, c.id, "b")
	b.waitStandby(t)

	a.signal(t, syscall.SIGKILL)
	a.waitExit(t, 10*time.Second)
	killed := time.Now()
	c.create(t, configMap("fo-a", "unowned", nil))

	bHeld := b.waitLeader(t, time.Minute)
	if aHeld, _ = a.held(); bHeld.from.Sub(aHeld.until.Add(-leaseDuration)) > failoverBound {
		t.Errorf("replica b acquired the lease %s after a's last renewal, want within %s",
			bHeld.from.Sub(aHeld.until.Add(-leaseDuration)), failoverBound)
	}
	c.waitResult(t, "fo-a", "unowned", v1alpha2.StatusWarn)
	if took, want := time.Since(killed), failoverBound+2*oneAudit+5*time.Second; took > want {
		t.Errorf("the change made after the kill was reported %s after it, want within %s (lease, and one audit of %s)", took, want, oneAudit)
	}
	wroteReports(t, a, "fo-a")
	wroteReports(t, b, "fo-a")
	stop(t, b)

	assertSingleWriter(t, a, b)
	c.assertFresh(t)
}

// TestRollingUpdate starts a new replica before the old one leaves, as a Deployment's rolling update does:
// the old one, stopped gracefully, releases the lease, and the new one takes over at once.
func TestRollingUpdate(t *testing.T) {
	c := newCluster(t)
	a := startReplica(t, c.env, c.id, "a")
	a.waitLeader(t, time.Minute)
	c.waitFirstAudit(t)
	probes := freeAddress(t)
	b := startReplica(t, c.env, c.id, "b", "--health-probe-bind-address="+probes)
	b.waitStandby(t)
	// The Deployment stops the old pod once the new one is ready: a standby must be.
	envtestutil.Eventually(t, 30*time.Second, func() error { return ready(probes) })

	stop(t, a)
	aHeld, _ := a.held()
	if !aHeld.released {
		t.Fatalf("replica a stopped without releasing the lease")
	}
	bHeld := b.waitLeader(t, time.Minute)
	// Without the release, b would wait out the lease duration after a's last renewal.
	if handover := bHeld.from.Sub(aHeld.until); handover > leaseDuration/2 {
		t.Errorf("replica b acquired the lease %s after a released it, want within %s", handover, leaseDuration/2)
	}
	c.create(t, configMap("fo-b", "unowned", nil))
	c.waitResult(t, "fo-b", "unowned", v1alpha2.StatusWarn)
	wroteReports(t, a, "fo-b")
	wroteReports(t, b, "fo-b")
	stop(t, b)

	assertSingleWriter(t, a, b)
	c.assertFresh(t)
}

// TestPausedLeaderFenced pauses the leader (SIGSTOP) past its lease: the standby takes over and reports a
// change. Resumed, the old leader still believes it leads until its elector notices, and has that change to
// report too (a report, the AuditPolicy's status, a NotSafeToEnforce Event): it must send none of it, and
// exit.
func TestPausedLeaderFenced(t *testing.T) {
	c := newCluster(t)
	a := startReplica(t, c.env, c.id, "a")
	a.waitLeader(t, time.Minute)
	c.waitFirstAudit(t)
	b := startReplica(t, c.env, c.id, "b")
	b.waitStandby(t)

	a.signal(t, syscall.SIGSTOP)
	c.create(t, configMap("fo-a", "unowned", nil))
	b.waitLeader(t, time.Minute)
	c.waitResult(t, "fo-a", "unowned", v1alpha2.StatusWarn)
	wroteReports(t, b, "fo-a")

	a.signal(t, syscall.SIGCONT)
	resumed := time.Now()
	if code := a.waitExit(t, time.Minute); code == 0 {
		t.Errorf("replica a exited with 0 after losing the lease, want an error")
	}
	if aHeld, _ := a.held(); !aHeld.until.Before(resumed) {
		t.Fatalf("replica a was resumed at %s, before its lease could have expired (%s): the scenario did not happen",
			resumed.Format("15:04:05.000"), aHeld.until.Format("15:04:05.000"))
	}
	t.Logf("replica a refused %d writes after it was resumed", strings.Count(a.out.String(), "write refused without being sent"))
	stop(t, b)

	assertSingleWriter(t, a, b)
	c.assertFresh(t)
}

// freeAddress returns a local address no one listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// ready returns nil when the probes at address answer /readyz with 200, as the kubelet checks.
func ready(address string) error {
	resp, err := http.Get("http://" + address + "/readyz?verbose")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %d: %s", resp.StatusCode, body)
	}
	return nil
}
