package controllers

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	auditv1alpha1 "github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/shard"
)

// sharding is what NewOperator knows of a sharded audit: the member's layout and the namespace its
// AuditShard, and every member's, live in (the operator's own, the Lease's). nil when the audit is not
// sharded: one process audits everything and nothing below exists.
type sharding struct {
	source    shard.Source
	namespace string
}

// parseSharding returns the sharding of the options, nil when o.Shard is unset. The rollups have one writer,
// the leader, so sharding needs leader election.
func (o Options) parseSharding() (*sharding, error) {
	if o.Shard == nil {
		return nil, nil
	}
	if !o.LeaderElect {
		return nil, fmt.Errorf("a sharded audit needs --leader-elect: the leader alone writes the AuditPolicies' status and registers their admission policies")
	}
	namespace, err := leaseNamespace(o.LeaderElectionNS)
	if err != nil {
		return nil, err
	}
	return &sharding{source: o.Shard, namespace: namespace}, nil
}

// everyMember returns r, run by every member when the audit is sharded (each audits its own namespaces),
// and by the leader only otherwise, as every runnable of the manager.
func everyMember(r manager.Runnable, sh *sharding) manager.Runnable {
	if sh == nil {
		return r
	}
	return notElected{r}
}

// notElected is a runnable that needs no leader election.
type notElected struct{ manager.Runnable }

func (notElected) NeedLeaderElection() bool { return false }

var _ manager.LeaderElectionRunnable = notElected{}

// listingOnStart returns the runnable that lists policies of one kind once the cache is synced, run as the
// reconciler that registers them is.
func listingOnStart(mgr manager.Manager, sh *sharding, list func(context.Context) error) manager.Runnable {
	return everyMember(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return ctx.Err()
		}
		return list(ctx)
	}), sh)
}

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

// memberControllerOptions returns the options of a controller with workers workers that every member of a
// sharded audit runs (the leader only, otherwise).
func memberControllerOptions(o Options, workers int, sh *sharding) func(*ctrl.Builder) *ctrl.Builder {
	return func(b *ctrl.Builder) *ctrl.Builder {
		opts := controller.Options{MaxConcurrentReconciles: max(1, workers), SkipNameValidation: ptr.To(o.SkipControllerChecks)}
		if sh != nil {
			opts.NeedLeaderElection = ptr.To(false)
		}
		return b.WithOptions(opts)
	}
}

// setupShards gives the AuditPolicy reconciler r what a sharded audit needs: the publisher of this
// member's AuditShard (added to mgr, run by every member, writing with the unfenced config), the leader's
// rollup of every member's and whether this process leads; and adds the leader's removal of the AuditShards
// of members gone.
func setupShards(unfenced *rest.Config, mgr ctrl.Manager, s settings, r *auditPolicyReconciler) error {
	gvk := auditv1alpha1.GroupVersion.WithKind("AuditShard")
	if ok, err := served(mgr.GetRESTMapper(), gvk); err != nil || !ok {
		if err != nil {
			return err
		}
		return fmt.Errorf("a sharded audit needs the AuditShard CRD (install config/crd)")
	}
	// Its own HTTP client: the manager's sends through the fence.
	c, err := client.New(unfenced, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		Cache: &client.CacheOptions{Reader: mgr.GetCache()}})
	if err != nil {
		return fmt.Errorf("creating the AuditShard client: %w", err)
	}
	r.Publisher = newShardPublisher(c, s.shards.namespace, s.shards.source, s.log.WithName("auditshard"))
	if err := mgr.Add(r.Publisher); err != nil {
		return fmt.Errorf("adding the AuditShard publisher: %w", err)
	}
	r.Rollups = &shardRollups{Reader: mgr.GetClient(), Namespace: s.shards.namespace, Source: s.shards.source}
	janitor := &shardJanitor{Client: mgr.GetClient(), Namespace: s.shards.namespace, Source: s.shards.source,
		Clock: clock.RealClock{}, Log: s.log.WithName("auditshard")}
	if err := mgr.Add(janitor); err != nil {
		return fmt.Errorf("adding the removal of gone members' AuditShards: %w", err)
	}
	r.Leads = func() bool { return elected(mgr) }
	return nil
}
