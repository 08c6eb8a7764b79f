package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/shard"
)

const (
	// goneShardGrace is how long the AuditShard of a member scaled away stays: a member that has not yet
	// learnt of the scale-in stops meanwhile, rather than recreate its AuditShard after the leader deleted it.
	goneShardGrace = 5 * time.Minute
	// goneShardInterval is how often the leader looks for them, in its cache.
	goneShardInterval = time.Minute
)

// shardJanitor deletes, on the leader, the AuditShards of members gone: their index is beyond the member
// count of the leader's epoch, which is newer, for goneShardGrace. The rollup ignores them from the start
// (their epoch is old); deleting them keeps `kubectl get auditshards` to the members there are. The
// AuditShard of an index within the count is never deleted: its member, at the new epoch, takes it over.
type shardJanitor struct {
	// Client reads AuditShards from the cache and deletes through the leader's fence.
	Client    client.Client
	Namespace string
	Source    shard.Source
	Clock     clock.PassiveClock
	Log       logr.Logger

	// since is when each AuditShard was first seen gone.
	since map[string]time.Time
}

// Start sweeps every goneShardInterval until ctx ends. It runs on the leader only.
func (j *shardJanitor) Start(ctx context.Context) error {
	j.since = map[string]time.Time{}
	t := time.NewTicker(goneShardInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := j.sweep(ctx); err != nil {
			j.Log.Error(err, "Removing the AuditShards of members gone failed")
		}
	}
}

func (j *shardJanitor) sweep(ctx context.Context) error {
	l, ok := j.Source.Layout()
	if !ok {
		return nil
	}
	list := &v1alpha1.AuditShardList{}
	if err := j.Client.List(ctx, list, client.InNamespace(j.Namespace)); err != nil {
		return fmt.Errorf("listing AuditShards: %w", err)
	}
	for _, name := range goneShards(list.Items, l, j.since, j.Clock.Now(), goneShardGrace) {
		as := &v1alpha1.AuditShard{}
		as.Namespace, as.Name = j.Namespace, name
		j.Log.Info("Removing the AuditShard of a member gone", "auditShard", name, "layout", l.String())
		if err := j.Client.Delete(ctx, as); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting AuditShard %s: %w", name, err)
		}
	}
	return nil
}

// goneShards returns the AuditShards gone for grace at now, at the leader's layout l: of an epoch up to
// l's and an index at or beyond its count. since holds when each was first seen gone; it is updated (a
// member back in the count is forgotten).
func goneShards(shards []v1alpha1.AuditShard, l shard.Layout, since map[string]time.Time, now time.Time, grace time.Duration) []string {
	seen := map[string]bool{}
	var out []string
	for _, as := range shards {
		if as.Status.Epoch > l.Epoch || int(as.Status.Index) < l.Count {
			continue
		}
		seen[as.Name] = true
		first, ok := since[as.Name]
		if !ok {
			since[as.Name] = now
			continue
		}
		if now.Sub(first) >= grace {
			out = append(out, as.Name)
		}
	}
	for name := range since {
		if !seen[name] {
			delete(since, name)
		}
	}
	return out
}
