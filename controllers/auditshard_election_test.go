package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/shard"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// electionLease names celaudit's leader election Lease.
const electionLease = "celaudit.celaudit.io"

// holdLease makes holder the holder of celaudit's leader election Lease in namespace, for an hour: no member
// acquires it until it is released. No member may hold it meanwhile (a leader would lose it).
func holdLease(t *testing.T, namespace, holder string) {
	t.Helper()
	ctx := context.Background()
	now := metav1.NewMicroTime(time.Now())
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(3600)), AcquireTime: &now, RenewTime: &now}
	envtestutil.Eventually(t, 10*time.Second, func() error {
		lease := &coordinationv1.Lease{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: electionLease}, lease)
		if apierrors.IsNotFound(err) {
			return env.Client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: electionLease}, Spec: spec})
		}
		if err != nil {
			return err
		}
		lease.Spec = spec
		return env.Client.Update(ctx, lease)
	})
}

// releaseLease releases celaudit's leader election Lease in namespace, as a leader that stops does: a member
// acquires it at its next attempt.
func releaseLease(t *testing.T, namespace string) {
	t.Helper()
	ctx := context.Background()
	envtestutil.Eventually(t, 10*time.Second, func() error {
		lease := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: electionLease}, lease); err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = ptr.To(""), ptr.To(int32(1)), &now
		return env.Client.Update(ctx, lease)
	})
}

// shardsAddUpTo waits until the AuditShards in namespace of the members of a layout of count add up, for the
// AuditPolicy name at its current generation, to matched matched objects and warn warnings.
func shardsAddUpTo(t *testing.T, namespace string, count int, name string, matched, warn int64) {
	t.Helper()
	ctx := context.Background()
	envtestutil.Eventually(t, 2*time.Minute, func() error {
		ap := &v1alpha1.AuditPolicy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, ap); err != nil {
			return err
		}
		var gotMatched, gotWarn int64
		for i := range count {
			as := &v1alpha1.AuditShard{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fmt.Sprintf("shard-%d", i)}, as); err != nil {
				return err
			}
			found := false
			for _, p := range as.Status.Policies {
				if p.Name == name && p.Generation == ap.Generation {
					gotMatched, gotWarn, found = gotMatched+p.Matched, gotWarn+p.Warn, true
				}
			}
			if !found {
				return fmt.Errorf("AuditShard shard-%d has no audit of %s generation %d: %+v", i, name, ap.Generation, as.Status)
			}
		}
		if gotMatched != matched || gotWarn != warn {
			return fmt.Errorf("the AuditShards add up to %d matched, %d warn; want %d, %d", gotMatched, gotWarn, matched, warn)
		}
		return nil
	})
}

// TestShardedRollupOnElection: a member elected after the members published their audits writes the
// AuditPolicy's status from them, although no AuditShard or AuditPolicy changes after its election. Each
// round, while a holder outside celaudit keeps the Lease, a violation is added and two members 0/2 and 1/2
// start and publish it; the Lease is released, and whichever member acquires it must write the new counts.
// A member elected decides what it leads only once the manager says so: a rollup it ran as its leader
// election runnables started would find it a member still, write nothing, and nothing would ask again. The
// race is won or lost at every election: several rounds catch it.
func TestShardedRollupOnElection(t *testing.T) {
	const (
		name   = "shel-owner"
		label  = "shel"
		rounds = 4
	)
	id := env.ShippedIdentity(t)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = env.Client.DeleteAllOf(ctx, &v1alpha1.AuditShard{}, client.InNamespace(id.Namespace))
		_ = client.IgnoreNotFound(env.Client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: id.Namespace, Name: electionLease}}))
	})
	// Four namespaces with a ConfigMap that has an owner each; both members own some.
	var namespaces []string
	owned := map[int]int{}
	for k := range 4 {
		ns := fmt.Sprintf("%c-shel", 'a'+k)
		namespaces = append(namespaces, ns)
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}})
		deleteAfter(t, namespace(ns))
		create(t, configMap(ns, "owned", map[string]string{"owner": "x"}))
		for i := range 2 {
			if (shard.Layout{Index: i, Count: 2}).OwnsNamespace(ns) {
				owned[i]++
			}
		}
	}
	if owned[0] == 0 || owned[1] == 0 {
		t.Fatalf("fixture: members 0/2 and 1/2 own %d and %d of %v", owned[0], owned[1], namespaces)
	}
	deleteAuditPolicyAfter(t, name)
	create(t, ownerAuditPolicy(name, label, "every ConfigMap needs an owner"))

	opts := auditPolicyOptions()
	opts.LeaderElect, opts.LeaderElectionNS = true, id.Namespace
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = 4*time.Second, 3*time.Second, 200*time.Millisecond
	for round := 1; round <= rounds; round++ {
		holdLease(t, id.Namespace, "outside-celaudit")
		// One more ConfigMap without an owner: the status due has round violations.
		create(t, configMap(namespaces[round%len(namespaces)], fmt.Sprintf("late-%d", round), map[string]string{"a": "b"}))
		matched, warn := int64(len(namespaces)+round), int64(round)
		var members []func()
		for i := range 2 {
			o := opts
			o.Shard = shard.Static(shard.Layout{Index: i, Count: 2})
			_, stop := envtestutil.StartOperator(t, id.Config, o)
			members = append(members, stop)
		}
		shardsAddUpTo(t, id.Namespace, 2, name, matched, warn)
		// Nobody leads: the status still has the counts of the round before.
		ap := &v1alpha1.AuditPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, ap); err != nil {
			t.Fatal(err)
		}
		if ap.Status.Violations == warn {
			t.Fatalf("round %d: the status has the new counts while no member leads: %+v", round, ap.Status)
		}

		// Nothing changes after the election: the member elected must add the AuditShards up of itself.
		releaseLease(t, id.Namespace)
		envtestutil.Eventually(t, time.Minute, func() error {
			if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, ap); err != nil {
				return err
			}
			if err := statusIs(matched, int64(len(namespaces)), 0, warn, 0, metav1.ConditionFalse)(ap); err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
			return nil
		})
		// The leader releases the Lease as it stops.
		for _, stop := range members {
			stop()
		}
	}
}
