package envtestutil

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AggregateClusterRoles stands in, until the test ends, for the clusterrole-aggregation controller of
// kube-controller-manager, which envtest does not run: each ClusterRole with an aggregationRule gets as rules
// those of every ClusterRole its selectors match, in the order of their names, each rule once, as upstream's
// controller (pkg/controller/clusterroleaggregation) writes them. It aggregates again on every change of a
// ClusterRole.
func (e *Env) AggregateClusterRoles(t testing.TB) {
	t.Helper()
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := aggregateAndWatch(ctx, c); err != nil && ctx.Err() == nil {
				t.Logf("aggregating ClusterRoles, retrying: %v", err)
				sleepCtx(ctx, time.Second)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// aggregateAndWatch aggregates every aggregated ClusterRole, then again after each change of a ClusterRole,
// until the watch ends or fails.
func aggregateAndWatch(ctx context.Context, c client.WithWatch) error {
	var list rbacv1.ClusterRoleList
	if err := c.List(ctx, &list); err != nil {
		return fmt.Errorf("listing ClusterRoles: %w", err)
	}
	if err := aggregate(ctx, c, list.Items); err != nil {
		return err
	}
	w, err := c.Watch(ctx, &rbacv1.ClusterRoleList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return fmt.Errorf("watching ClusterRoles: %w", err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return fmt.Errorf("watching ClusterRoles: %v", ev.Object)
		}
		if ev.Type == watch.Bookmark {
			continue
		}
		// A change may concern any aggregated role: read them all again, there are few.
		if err := c.List(ctx, &list); err != nil {
			return fmt.Errorf("listing ClusterRoles: %w", err)
		}
		if err := aggregate(ctx, c, list.Items); err != nil {
			return err
		}
	}
	return nil
}

// aggregate updates the rules of each aggregated ClusterRole among roles that differ from what its
// selectors aggregate.
func aggregate(ctx context.Context, c client.Client, roles []rbacv1.ClusterRole) error {
	sort.Slice(roles, func(i, j int) bool { return roles[i].Name < roles[j].Name })
	for i := range roles {
		target := &roles[i]
		if target.AggregationRule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range target.AggregationRule.ClusterRoleSelectors {
			selector, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				return fmt.Errorf("aggregation rule of ClusterRole %s: %w", target.Name, err)
			}
			for _, source := range roles {
				if source.Name == target.Name || !selector.Matches(labels.Set(source.Labels)) {
					continue
				}
				for _, r := range source.Rules {
					if !slices.ContainsFunc(rules, func(have rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(have, r) }) {
						rules = append(rules, r)
					}
				}
			}
		}
		if equality.Semantic.DeepEqual(rules, target.Rules) || len(rules) == 0 && len(target.Rules) == 0 {
			continue
		}
		updated := target.DeepCopy()
		updated.Rules = rules
		if err := c.Update(ctx, updated); err != nil {
			return fmt.Errorf("updating the aggregated rules of ClusterRole %s: %w", target.Name, err)
		}
	}
	return nil
}

// sleepCtx waits for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
