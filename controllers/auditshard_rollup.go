package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/shard"
)

// rollup is one AuditPolicy's audit across the members of a sharded audit, as the leader adds it up.
type rollup struct {
	summary results.Summary
	// complete says that members of the current epoch whose ranges cover the whole hash space, each once,
	// all completed an audit of the policy's current generation; at is the latest of their times.
	complete bool
	at       time.Time
	// pending says why it is not complete; "" when it is.
	pending string
}

// rollUp adds up the AuditPolicy name at generation over the AuditShards of epoch. Only a complete rollup
// has counts: a partial sum would show some namespaces' violations as the whole cluster's.
func rollUp(shards []v1alpha1.AuditShard, epoch int64, name string, generation int64) rollup {
	var (
		ranges  []shard.Range
		members []string
		behind  []string
		sum     results.Summary
		at      time.Time
	)
	for i := range shards {
		st := &shards[i].Status
		if st.Epoch != epoch {
			continue
		}
		own, ok := parseRanges(st.Ranges)
		if !ok {
			continue
		}
		ranges = append(ranges, own...)
		member := fmt.Sprintf("%d/%d", st.Index, st.Count)
		members = append(members, member)
		i := slices.IndexFunc(st.Policies, func(p v1alpha1.AuditShardPolicy) bool { return p.Name == name })
		if i < 0 || st.Policies[i].Generation != generation {
			behind = append(behind, member)
			continue
		}
		addShard(&sum, st.Policies[i])
		if t := st.Policies[i].AuditTime.Time; t.After(at) {
			at = t
		}
	}
	slices.Sort(members)
	slices.Sort(behind)
	switch {
	case !shard.Cover(ranges):
		return rollup{pending: fmt.Sprintf("the members of shard epoch %d that published (%s) do not cover every namespace",
			epoch, listOrNone(members))}
	case len(behind) > 0:
		return rollup{pending: fmt.Sprintf("members %s of shard epoch %d have not completed an audit of generation %d",
			strings.Join(behind, ", "), epoch, generation)}
	}
	return rollup{summary: sum, complete: true, at: at}
}

// parseRanges parses a member's published ranges; false when it published none (a member of a version that
// wrote one contiguous range in rangeStart and rangeEnd) or one does not parse: such a member covers
// nothing, and the rollup waits for it rather than trust a range it cannot read.
func parseRanges(published []v1alpha1.HashRange) ([]shard.Range, bool) {
	if len(published) == 0 {
		return nil, false
	}
	out := make([]shard.Range, 0, len(published))
	for _, p := range published {
		r, err := shard.ParseRange(p.Start, p.End)
		if err != nil {
			return nil, false
		}
		out = append(out, r)
	}
	return out, true
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// addShard adds one member's counts to sum. Its top namespaces are all the leader learns of namespaces:
// enough for the cluster's top ones (see shardPolicy).
func addShard(sum *results.Summary, p v1alpha1.AuditShardPolicy) {
	sum.Matched += int(p.Matched)
	sum.Judged += int(p.Judged)
	sum.Violating += int(p.Violating)
	sum.Pass += int(p.Pass)
	sum.Fail += int(p.Fail)
	sum.Warn += int(p.Warn)
	sum.Error += int(p.Error)
	sum.Skip += int(p.Skip)
	sum.Resources += int(p.Resources)
	sum.ResourceErrors += int(p.ResourceErrors)
	sum.Configuration += int(p.Configuration)
	for _, n := range p.TopNamespaces {
		if sum.Namespaces == nil {
			sum.Namespaces = map[string]int{}
		}
		sum.Namespaces[n.Namespace] += int(n.Violations)
	}
}

// shardRollups reads the AuditShards and adds them up for the leader.
type shardRollups struct {
	// Reader reads AuditShards (the manager's cache, which holds those of Namespace).
	Reader    client.Reader
	Namespace string
	// Source is the leader's own layout: its epoch is the current one.
	Source shard.Source

	mu sync.Mutex
	// last is what the leader last decided of each AuditPolicy, for its metrics.
	last map[string]rolledUp
}

// rolledUp is what the leader last decided of one AuditPolicy: the counts of the last complete rollup,
// whether the latest one is complete, and whether it is safe to enforce.
type rolledUp struct {
	summary  results.Summary
	complete bool
	safe     bool
}

// record records what the leader decided of the AuditPolicy name: an incomplete rollup keeps the counts of
// the last complete one, as the AuditPolicy's status does.
func (s *shardRollups) record(name string, complete bool, sum results.Summary, safety results.Safety) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]rolledUp{}
	}
	r := s.last[name]
	r.complete, r.safe = complete, complete && safety.Safe()
	if complete {
		r.summary = sum
	}
	s.last[name] = r
}

// forget drops the AuditPolicy name, which is gone.
func (s *shardRollups) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, name)
}

func (s *shardRollups) snapshot() map[string]rolledUp {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.last)
}

// rollupCollector exposes, on the leader, each AuditPolicy across all members: the members' own
// celaudit_policy_* metrics each describe a share. Only the leader adds up, so only its metrics have these.
type rollupCollector struct {
	rollups   *shardRollups
	results   *prometheus.Desc
	violating *prometheus.Desc
	complete  *prometheus.Desc
	safe      *prometheus.Desc
}

// labelPolicy is the label of the rollup metrics naming the AuditPolicy.
const labelPolicy = "policy"

func newRollupCollector(r *shardRollups) *rollupCollector {
	labels := []string{labelPolicy}
	return &rollupCollector{
		rollups: r,
		results: prometheus.NewDesc("celaudit_auditpolicy_rollup_results",
			"Results of each AuditPolicy by verdict across all members of a sharded audit, at the last complete audit of all of them (leader only).",
			[]string{labelPolicy, "result"}, nil),
		violating: prometheus.NewDesc("celaudit_auditpolicy_rollup_violating_objects",
			"Objects with a fail or warn result of each AuditPolicy across all members, at the last complete audit of all of them (leader only).", labels, nil),
		complete: prometheus.NewDesc("celaudit_auditpolicy_rollup_complete",
			"1 when every member of the current epoch, covering every namespace, has completed an audit of the AuditPolicy's current generation; else 0 (leader only).", labels, nil),
		safe: prometheus.NewDesc("celaudit_auditpolicy_rollup_safe_to_enforce",
			"1 when the AuditPolicy is safe to enforce from a complete audit of all members; else 0 (leader only).", labels, nil),
	}
}

func (c *rollupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.results
	ch <- c.violating
	ch <- c.complete
	ch <- c.safe
}

func (c *rollupCollector) Collect(ch chan<- prometheus.Metric) {
	last := c.rollups.snapshot()
	for _, name := range slices.Sorted(maps.Keys(last)) {
		r := last[name]
		s := r.summary
		for _, v := range []struct {
			verdict audit.Verdict
			n       int
		}{{audit.Pass, s.Pass}, {audit.Fail, s.Fail}, {audit.Warn, s.Warn}, {audit.Error, s.Error}, {audit.Skip, s.Skip}} {
			ch <- prometheus.MustNewConstMetric(c.results, prometheus.GaugeValue, float64(v.n), name, string(v.verdict))
		}
		ch <- prometheus.MustNewConstMetric(c.violating, prometheus.GaugeValue, float64(s.Violating), name)
		ch <- prometheus.MustNewConstMetric(c.complete, prometheus.GaugeValue, boolGauge(r.complete), name)
		ch <- prometheus.MustNewConstMetric(c.safe, prometheus.GaugeValue, boolGauge(r.safe), name)
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Rollup returns the AuditPolicy name at generation added up over the members of the current epoch.
func (s *shardRollups) Rollup(ctx context.Context, name string, generation int64) (rollup, error) {
	l, ok := s.Source.Layout()
	if !ok {
		return rollup{pending: "the leader does not know the shard membership yet"}, nil
	}
	list := &v1alpha1.AuditShardList{}
	if err := s.Reader.List(ctx, list, client.InNamespace(s.Namespace)); err != nil {
		return rollup{}, fmt.Errorf("listing AuditShards: %w", err)
	}
	return rollUp(list.Items, l.Epoch, name, generation), nil
}
