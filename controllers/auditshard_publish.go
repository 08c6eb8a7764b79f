package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/shard"
)

// maxShardRetry bounds the wait between attempts to publish an AuditShard the API server did not accept.
const maxShardRetry = 30 * time.Second

// shardName names the AuditShard of the member of index: one per index, which the member of the same index
// in a later epoch takes over (a StatefulSet's pod of ordinal i is the member of index i).
func shardName(index int) string { return fmt.Sprintf("shard-%d", index) }

// shardPublisher publishes one member's audits of AuditPolicies in its AuditShard, for the leader to add up.
// The reconciler tells it what each reconcile observed (Observed); it writes the AuditShard's status from its
// own goroutine, and only when it differs from the stored one: nothing while idle.
type shardPublisher struct {
	// Client writes the AuditShard. It is not behind the leader's fence: every member writes its own.
	Client    client.Client
	Namespace string
	Source    shard.Source
	Log       logr.Logger

	wake chan struct{}

	mu sync.Mutex
	// policies are the last complete audit of each AuditPolicy; generations the generation each was last
	// seen at, complete or not.
	policies    map[string]v1alpha1.AuditShardPolicy
	generations map[string]int64
}

var _ manager.LeaderElectionRunnable = &shardPublisher{}

func newShardPublisher(c client.Client, namespace string, source shard.Source, log logr.Logger) *shardPublisher {
	return &shardPublisher{
		Client: c, Namespace: namespace, Source: source, Log: log,
		wake:     make(chan struct{}, 1),
		policies: map[string]v1alpha1.AuditShardPolicy{}, generations: map[string]int64{},
	}
}

// Observed records what a reconcile of the AuditPolicy name at generation observed: when complete, this
// member's summary of its namespaces, taken at at. An incomplete observation keeps the last complete one,
// whose older generation tells the leader that this member is not done. It never blocks.
func (p *shardPublisher) Observed(name string, generation int64, complete bool, at time.Time, s results.Summary) {
	p.mu.Lock()
	changed := p.generations[name] != generation
	p.generations[name] = generation
	if complete {
		entry := shardPolicy(name, generation, s)
		old, had := p.policies[name]
		entry.AuditTime = old.AuditTime
		// The time is when the counts took their value: a later audit that finds the same leaves it, so
		// that an idle member writes nothing.
		if !had || !equality.Semantic.DeepEqual(old, entry) {
			entry.AuditTime = metav1.NewTime(at.Truncate(time.Second))
			p.policies[name] = entry
			changed = true
		}
	}
	p.mu.Unlock()
	if changed {
		p.poke()
	}
}

// Forget drops the AuditPolicy name, which is gone.
func (p *shardPublisher) Forget(name string) {
	p.mu.Lock()
	_, had := p.generations[name]
	delete(p.policies, name)
	delete(p.generations, name)
	p.mu.Unlock()
	if had {
		p.poke()
	}
}

func (p *shardPublisher) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// NeedLeaderElection is false: every member publishes.
func (p *shardPublisher) NeedLeaderElection() bool { return false }

// Start publishes after every change of the audits or of the layout, retrying a failed write with backoff,
// until ctx ends.
func (p *shardPublisher) Start(ctx context.Context) error {
	p.Source.Subscribe(func(shard.Layout) { p.poke() })
	p.poke()
	var backoff time.Duration
	for {
		var retry *time.Timer
		var fire <-chan time.Time
		if backoff > 0 {
			retry = time.NewTimer(backoff)
			fire = retry.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		case <-fire:
		}
		if retry != nil {
			retry.Stop()
		}
		if err := p.publish(ctx); err != nil {
			backoff = min(max(2*backoff, time.Second), maxShardRetry)
			p.Log.Error(err, "Publishing this member's AuditShard failed", "retryIn", backoff.String())
			continue
		}
		backoff = 0
	}
}

// publish writes the member's AuditShard when it differs from the stored one. A member that knows no layout
// yet, or is not sharded, writes nothing; nor does one that owns nothing (scaled away: its AuditShard stays
// at its last epoch, which the leader's rollup ignores and its janitor removes), nor one whose AuditShard a
// member of a later epoch holds.
func (p *shardPublisher) publish(ctx context.Context) error {
	l, ok := p.Source.Layout()
	if !ok || !l.Sharded() || l.None {
		return nil
	}
	want := p.status(l)
	key := client.ObjectKey{Namespace: p.Namespace, Name: shardName(l.Index)}
	got := &v1alpha1.AuditShard{}
	if err := p.Client.Get(ctx, key, got); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting AuditShard %s: %w", key, err)
		}
		got = &v1alpha1.AuditShard{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if err := p.Client.Create(ctx, got); err != nil {
			return fmt.Errorf("creating AuditShard %s: %w", key, err)
		}
	}
	if got.Status.Epoch > l.Epoch {
		p.Log.V(1).Info("A member of a later epoch holds this member's AuditShard: not written", "auditShard", key.String(),
			"epoch", got.Status.Epoch, "layout", l.String())
		return nil
	}
	if equality.Semantic.DeepEqual(got.Status, want) {
		return nil
	}
	// The resource version makes the update fail, rather than overwrite, when another member wrote since.
	got.Status = want
	if err := p.Client.Status().Update(ctx, got); err != nil {
		return fmt.Errorf("writing the status of AuditShard %s: %w", key, err)
	}
	return nil
}

// status returns the AuditShard status of the member at layout l.
func (p *shardPublisher) status(l shard.Layout) v1alpha1.AuditShardStatus {
	st := v1alpha1.AuditShardStatus{Index: int32(l.Index), Count: int32(l.Count), Epoch: l.Epoch, Stripes: int32(l.RangesPerMember())}
	for _, r := range l.Ranges() {
		start, end := r.Strings()
		st.Ranges = append(st.Ranges, v1alpha1.HashRange{Start: start, End: end})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(p.policies)) {
		entry := p.policies[name]
		st.Policies = append(st.Policies, entry)
		if entry.Generation == p.generations[name] {
			st.CompletePolicies++
		}
	}
	return st
}

// shardPolicy is the AuditShard entry of a member's summary of the AuditPolicy name at generation, without
// its time. The member's top namespaces are enough for the leader: each namespace has one member, so a
// namespace among the cluster's top N is among its member's top N (at most N-1 namespaces come before it in
// the cluster, so at most N-1 in its member).
func shardPolicy(name string, generation int64, s results.Summary) v1alpha1.AuditShardPolicy {
	e := v1alpha1.AuditShardPolicy{
		Name: name, Generation: generation,
		Matched: int64(s.Matched), Judged: int64(s.Judged), Violating: int64(s.Violating),
		Pass: int64(s.Pass), Fail: int64(s.Fail), Warn: int64(s.Warn), Error: int64(s.Error), Skip: int64(s.Skip),
		Resources: int64(s.Resources), ResourceErrors: int64(s.ResourceErrors), Configuration: int64(s.Configuration),
	}
	for _, n := range s.TopNamespaces(topViolatingNamespaces) {
		e.TopNamespaces = append(e.TopNamespaces, v1alpha1.NamespaceViolations{Namespace: n.Namespace, Violations: int64(n.Violations)})
	}
	return e
}
