package controllers

import (
	"context"
	"fmt"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	auditv1alpha1 "github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/shard"
)

// ownedSummaries are the summaries of the namespaces the member owns: its share of the audit, which
// readiness keeps and the member publishes in its AuditShard.
type ownedSummaries struct {
	store  *results.Store
	source shard.Source
}

var _ summarizer = ownedSummaries{}

func (s ownedSummaries) Summaries() map[audit.PolicyKey]results.Summary {
	l, ok := s.source.Layout()
	if !ok {
		// No layout yet: the member owns nothing it knows of.
		return map[audit.PolicyKey]results.Summary{}
	}
	return s.store.SummariesWhere(l.OwnsNamespace)
}

// Every member writes its own AuditShard through the namespaced Role of its namespace; the cluster-wide read
// is for the audit of celaudit's own CRDs, whose rules judge AuditShards as any other custom resource.
// +kubebuilder:rbac:groups=audit.celaudit.io,resources=auditshards,verbs=get;list;watch

// setupShards gives the AuditPolicy reconciler r what a sharded audit needs: the publisher of this
// member's AuditShard (run by every member: the fence lets AuditShards through, see memberWrites), the
// leader's rollup of every member's and whether this process leads; and adds what the leader alone runs:
// the removal of the AuditShards of members gone, and a reconcile of every AuditPolicy once elected (as a
// member it only published its share of them).
func setupShards(mgr ctrl.Manager, s settings, r *auditPolicyReconciler) error {
	gvk := auditv1alpha1.GroupVersion.WithKind("AuditShard")
	if ok, err := served(mgr.GetRESTMapper(), gvk); err != nil || !ok {
		if err != nil {
			return err
		}
		return fmt.Errorf("a sharded audit needs the AuditShard CRD (install config/crd)")
	}
	namespace, source := s.members.namespace, s.members.source
	r.Publisher = newShardPublisher(mgr.GetClient(), namespace, source, s.log.WithName("auditshard"))
	if err := mgr.Add(r.Publisher); err != nil {
		return fmt.Errorf("adding the AuditShard publisher: %w", err)
	}
	r.Rollups = &shardRollups{Reader: mgr.GetClient(), Namespace: namespace, Source: source}
	janitor := &shardJanitor{Client: mgr.GetClient(), Namespace: namespace, Source: source,
		Clock: clock.RealClock{}, Log: s.log.WithName("auditshard")}
	if err := mgr.Add(janitor); err != nil {
		return fmt.Errorf("adding the removal of gone members' AuditShards: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		// The manager starts its leader election runnables before it closes Elected: a reconcile enqueued
		// right away could still find this member not leading, only publish its share and write no status,
		// and nothing would enqueue the AuditPolicy again (the AuditShards it saw change as a member, whose
		// events it dropped, do not change again).
		select {
		case <-mgr.Elected():
			r.discoveryChanged()
		case <-ctx.Done():
		}
		return nil
	})); err != nil {
		return fmt.Errorf("adding the leader's first rollup: %w", err)
	}
	r.Leads = func() bool { return elected(mgr) }
	return nil
}
