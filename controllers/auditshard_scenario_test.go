package controllers_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/internal/fence"
	"github.com/celaudit/celaudit/internal/shard"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// shardedMember is one in-process member of a sharded audit, counting its requests and keeping its logs.
type shardedMember struct {
	op       *controllers.Operator
	requests *envtestutil.RequestCounter
	logs     *lockedLines
	stop     func()
}

// lockedLines are log lines written from several goroutines.
type lockedLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockedLines) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

func (l *lockedLines) containing(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// startMember runs member index of count as celaudit's shipped identity, with leader election.
func startMember(t *testing.T, id envtestutil.Identity, index, count int) shardedMember {
	t.Helper()
	opts := auditPolicyOptions()
	opts.LeaderElect, opts.LeaderElectionNS = true, id.Namespace
	opts.Shard = shard.Static(shard.Layout{Index: index, Count: count})
	logs := &lockedLines{}
	opts.Logger = funcr.New(func(prefix, args string) { logs.add(prefix + " " + args) }, funcr.Options{})
	requests := &envtestutil.RequestCounter{}
	op, stop := envtestutil.StartOperator(t, requests.Wrap(id.Config), opts)
	return shardedMember{op: op, requests: requests, logs: logs, stop: stop}
}

// rollupMetrics returns the celaudit_auditpolicy_rollup_* series of policy an operator exports, by name and,
// for results, verdict ("celaudit_auditpolicy_rollup_results/warn").
func rollupMetrics(t *testing.T, op *controllers.Operator, policy string) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(controllers.Collectors(op)...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "celaudit_auditpolicy_rollup_") {
			continue
		}
		for _, m := range f.GetMetric() {
			key, mine := f.GetName(), false
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "policy":
					mine = l.GetValue() == policy
				case "result":
					key += "/" + l.GetValue()
				}
			}
			if mine {
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// auditShardsPublished waits until the AuditShards of the given indexes list the AuditPolicies names, each
// audited at its current generation.
func auditShardsPublished(t *testing.T, namespace string, indexes []int, names ...string) {
	t.Helper()
	ctx := context.Background()
	envtestutil.Eventually(t, 2*time.Minute, func() error {
		for _, i := range indexes {
			as := &v1alpha1.AuditShard{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fmt.Sprintf("shard-%d", i)}, as); err != nil {
				return err
			}
			for _, name := range names {
				ap := &v1alpha1.AuditPolicy{}
				if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, ap); err != nil {
					return err
				}
				found := false
				for _, p := range as.Status.Policies {
					found = found || (p.Name == name && p.Generation == ap.Generation)
				}
				if !found {
					return fmt.Errorf("AuditShard shard-%d has no audit of %s generation %d: %+v", i, name, ap.Generation, as.Status)
				}
			}
		}
		return nil
	})
}

// shardedFixture creates eleven namespaces labelled shr=yes: namespace k holds k+1 ConfigMaps without an owner
// and one with (distinct counts, so that the order of the top namespaces is fixed; the top ten leave the first
// one out). It returns the status ownerAuditPolicy writes of them in Audit, worked out by hand. Names differ in
// their first letter: FNV-1a spreads a change of the last letters little.
func shardedFixture(t *testing.T) v1alpha1.AuditPolicyStatus {
	t.Helper()
	var namespaces []string
	want := v1alpha1.AuditPolicyStatus{}
	for k := range 11 {
		ns := fmt.Sprintf("%c-shr", 'a'+k)
		namespaces = append(namespaces, ns)
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"shr": "yes"}}})
		deleteAfter(t, namespace(ns))
		create(t, configMap(ns, "owned", map[string]string{"owner": "x"}))
		for j := range k + 1 {
			create(t, configMap(ns, fmt.Sprintf("orphan-%d", j), map[string]string{"a": "b"}))
		}
		want.Matched += int64(k + 2)
		want.Pass++
		want.Warn += int64(k + 1)
		want.TopNamespaces = append([]v1alpha1.NamespaceViolations{{Namespace: ns, Violations: int64(k + 1)}}, want.TopNamespaces...)
	}
	want.Violations = want.Warn
	want.TopNamespaces = want.TopNamespaces[:10]
	// Every member owns some of them: the fixture exercises the sum, not one member's share.
	for i := range 3 {
		owns := 0
		for _, ns := range namespaces {
			if (shard.Layout{Index: i, Count: 3}).OwnsNamespace(ns) {
				owns++
			}
		}
		if owns == 0 {
			t.Fatalf("fixture: member %d/3 owns none of %v", i, namespaces)
		}
	}
	return want
}

// expectAuditPolicySlow is expectAuditPolicy with room for operators that start, elect and audit on a
// loaded machine.
func expectAuditPolicySlow(t *testing.T, name string, check func(*v1alpha1.AuditPolicy) error) *v1alpha1.AuditPolicy {
	t.Helper()
	ap := &v1alpha1.AuditPolicy{}
	envtestutil.Eventually(t, 3*time.Minute, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, ap); err != nil {
			return err
		}
		return check(ap)
	})
	return ap
}

// expectNothingClaimed waits until the leader says, of owner, that members 0/3 and 1/3 do not cover every
// namespace, with no counts; and of clean, in Deny, that the gate refuses it, with nothing registered.
func expectNothingClaimed(t *testing.T, owner, clean string) {
	t.Helper()
	expectAuditPolicySlow(t, owner, func(ap *v1alpha1.AuditPolicy) error {
		c := condition(ap, v1alpha1.ConditionSafeToEnforce)
		if c.Status != metav1.ConditionUnknown || c.Reason != controllers.ReasonAuditPending || !strings.Contains(c.Message, "(0/3, 1/3) do not cover every namespace") {
			return fmt.Errorf("SafeToEnforce with members 0/3 and 1/3 published: %+v", c)
		}
		if ap.Status.Matched != 0 || ap.Status.Violations != 0 || ap.Status.LastAuditTime != nil || len(ap.Status.TopNamespaces) != 0 {
			return fmt.Errorf("counts claimed from two of three members: %+v", ap.Status)
		}
		return nil
	})
	expectAuditPolicySlow(t, clean, enforcedIs(metav1.ConditionFalse, controllers.ReasonNotSafeToEnforce, "the sharded audit of generation 1 is not complete"))
	if policy, binding := pairExists(t, clean); policy || binding {
		t.Fatalf("the clean policy was registered for Deny with one member missing (policy %v, binding %v)", policy, binding)
	}
}

// expectOneWriter checks that one member, the leader, wrote AuditPolicies and the pair, and the others none
// (nor tried: the leader's fence, which refuses their writes before they are sent and counted, logged none);
// and that every member wrote its AuditShard.
func expectOneWriter(t *testing.T, members []shardedMember) {
	t.Helper()
	writers := 0
	for i, m := range members {
		if refused := m.logs.containing(fence.ErrNotHeld.Error()); len(refused) > 0 {
			t.Errorf("member %d/3 tried %d writes only the leader may send, first: %s", i, len(refused), refused[0])
		}
		if m.requests.Writes("auditshards") == 0 {
			t.Errorf("member %d/3 never wrote its AuditShard", i)
		}
		policyWrites := m.requests.Writes("auditpolicies")
		pairWrites := m.requests.Writes("validatingadmissionpolicies") + m.requests.Writes("validatingadmissionpolicybindings")
		switch {
		case policyWrites > 0:
			writers++
			if pairWrites == 0 {
				t.Errorf("member %d/3 wrote AuditPolicies but not the pair", i)
			}
		case pairWrites > 0:
			t.Errorf("member %d/3, not the AuditPolicies' writer, wrote the pair %d times", i, pairWrites)
		}
	}
	if writers != 1 {
		t.Fatalf("%d members wrote AuditPolicies, want the leader alone", writers)
	}
}

// expectRollupMetrics checks that the leader alone exports the rollup's metrics: owner's counts as want,
// complete and not safe; clean safe.
func expectRollupMetrics(t *testing.T, members []shardedMember, owner, clean string, want v1alpha1.AuditPolicyStatus) {
	t.Helper()
	exporters := 0
	for i, m := range members {
		got := rollupMetrics(t, m.op, owner)
		if len(got) == 0 {
			continue
		}
		exporters++
		if m.requests.Writes("auditpolicies") == 0 {
			t.Errorf("member %d/3 exports rollup metrics but is not the leader: %v", i, got)
		}
		if got["celaudit_auditpolicy_rollup_complete"] != 1 || got["celaudit_auditpolicy_rollup_results/warn"] != float64(want.Warn) ||
			got["celaudit_auditpolicy_rollup_results/pass"] != float64(want.Pass) || got["celaudit_auditpolicy_rollup_violating_objects"] != float64(want.Warn) ||
			got["celaudit_auditpolicy_rollup_safe_to_enforce"] != 0 {
			t.Errorf("the leader's rollup metrics of %s: %v", owner, got)
		}
		if cm := rollupMetrics(t, m.op, clean); cm["celaudit_auditpolicy_rollup_safe_to_enforce"] != 1 {
			t.Errorf("the leader's rollup metrics of %s: %v", clean, cm)
		}
	}
	if exporters != 1 {
		t.Errorf("%d members export rollup metrics, want the leader alone", exporters)
	}
}

// TestShardedRollup: three members with static layouts 0/3, 1/3 and 2/3 audit namespaces with violations of
// an AuditPolicy. With two of them running, the AuditPolicy's status claims no complete audit and the
// enforcement gate refuses Deny to a clean policy; with the third, the leader alone writes the status, which
// equals what one unsharded celaudit writes, and registers the clean policy for Deny.
func TestShardedRollup(t *testing.T) {
	const owner, clean = "shr-owner", "shr-clean"
	want := shardedFixture(t)
	id := env.ShippedIdentity(t)
	t.Cleanup(func() {
		_ = env.Client.DeleteAllOf(context.Background(), &v1alpha1.AuditShard{}, client.InNamespace(id.Namespace))
	})
	members := []shardedMember{startMember(t, id, 0, 3), startMember(t, id, 1, 3)}

	deleteAuditPolicyAfter(t, owner)
	deleteAuditPolicyAfter(t, clean)
	create(t, ownerAuditPolicy(owner, "shr", "every ConfigMap needs an owner"))
	cleanPolicy := ownerAuditPolicy(clean, "shr", "every ConfigMap has a name")
	cleanPolicy.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "object.metadata.name != ''", Message: "every ConfigMap has a name"}}
	cleanPolicy.Spec.Enforcement = v1alpha1.Deny
	create(t, cleanPolicy)

	// Two of three members: both published, yet nothing is claimed complete and Deny is refused.
	auditShardsPublished(t, id.Namespace, []int{0, 1}, owner, clean)
	expectNothingClaimed(t, owner, clean)

	// The third member: the rollup is complete.
	members = append(members, startMember(t, id, 2, 3))
	sharded := expectAuditPolicySlow(t, owner, func(ap *v1alpha1.AuditPolicy) error {
		if err := statusIs(want.Matched, want.Pass, 0, want.Warn, 0, metav1.ConditionFalse)(ap); err != nil {
			return err
		}
		if !reflect.DeepEqual(ap.Status.TopNamespaces, want.TopNamespaces) || ap.Status.LastAuditTime == nil {
			return fmt.Errorf("top namespaces %v (last audit %v), want %v", ap.Status.TopNamespaces, ap.Status.LastAuditTime, want.TopNamespaces)
		}
		return nil
	})
	expectAuditPolicySlow(t, clean, both(safeToEnforceIs(metav1.ConditionTrue, "NoViolations"), enforcedIs(metav1.ConditionTrue, controllers.ReasonRegistered)))
	expectRegistered(t, clean, true)
	expectOneWriter(t, members)
	expectRollupMetrics(t, members, owner, clean, want)

	// One unsharded celaudit writes the same status. The sharded one is cleared first: times in a status
	// have whole seconds, and an unsharded audit that ends within the second of the sharded one would write
	// the same lastAuditTime, which could not tell its status from the one left by the members.
	for _, m := range members {
		m.stop()
	}
	clearStatus(t, owner)
	opts := auditPolicyOptions()
	opts.LeaderElect, opts.LeaderElectionNS = true, id.Namespace
	envtestutil.StartOperator(t, id.Config, opts)
	single := expectAuditPolicySlow(t, owner, func(ap *v1alpha1.AuditPolicy) error {
		if ap.Status.LastAuditTime == nil {
			return fmt.Errorf("status not written by the unsharded celaudit yet")
		}
		return nil
	})
	t.Logf("last audit: sharded %s, unsharded %s", sharded.Status.LastAuditTime, single.Status.LastAuditTime)
	got, ref := sharded.Status, single.Status
	if got.Matched != ref.Matched || got.Pass != ref.Pass || got.Fail != ref.Fail || got.Warn != ref.Warn || got.Error != ref.Error ||
		got.Skip != ref.Skip || got.Violations != ref.Violations || !reflect.DeepEqual(got.TopNamespaces, ref.TopNamespaces) {
		t.Errorf("sharded status %+v\nunsharded status %+v", got, ref)
	}
	if gs, rs := condition(sharded, v1alpha1.ConditionSafeToEnforce), condition(single, v1alpha1.ConditionSafeToEnforce); gs.Status != rs.Status || gs.Reason != rs.Reason {
		t.Errorf("sharded SafeToEnforce %s %s, unsharded %s %s", gs.Status, gs.Reason, rs.Status, rs.Reason)
	}
}

// clearStatus empties the AuditPolicy's status, as no celaudit ever wrote it.
func clearStatus(t *testing.T, name string) {
	t.Helper()
	envtestutil.Eventually(t, 30*time.Second, func() error {
		ap := &v1alpha1.AuditPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, ap); err != nil {
			return err
		}
		ap.Status = v1alpha1.AuditPolicyStatus{}
		return env.Client.Status().Update(context.Background(), ap)
	})
}
