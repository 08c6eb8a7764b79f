package scan_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/internal/shard"
	"github.com/celaudit/celaudit/test/envtestutil"
)

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// everyObjectPolicy passes every config map and every Namespace (cluster-scoped).
type everyObjectPolicy struct{}

func (everyObjectPolicy) Key() audit.PolicyKey { return audit.PolicyKey{Source: "test", Name: "every"} }
func (everyObjectPolicy) Resources() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{configMaps, namespaces}
}
func (everyObjectPolicy) Evaluate(_ context.Context, _ schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	return []audit.Result{{Policy: "every", Verdict: audit.Pass, Resource: audit.RefOf(obj)}}
}

// member is a scanner reading the cluster under one layout.
type member struct {
	scanner *scan.Scanner
	store   *results.Store
}

func startMember(t *testing.T, e *envtestutil.Env, l shard.Layout) member {
	t.Helper()
	client, err := scan.NewClient(e.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := results.NewStore(nil, results.KeepPasses(true))
	return member{scanner: startSharded(t, client, store, l, everyObjectPolicy{}, scan.Options{PageSize: 7}), store: store}
}

// objects returns "kind namespace/name" of every object m has a result for, sorted.
func (m member) objects(t *testing.T) []string {
	t.Helper()
	waitSynced(t, m.scanner)
	var out []string
	for _, ns := range m.store.Namespaces() {
		res, err := current(m.store, ns)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			out = append(out, r.Resource.Kind+" "+r.Resource.Namespace+"/"+r.Resource.Name)
		}
	}
	sort.Strings(out)
	return out
}

// Members of a layout read, together, exactly what one unsharded scanner reads, each object once: config
// maps of many namespaces and the cluster-scoped Namespaces. With ShardedListAndWatch the API server
// filters (and says so in shardInfo); without it, each member filters what it receives. A running member
// whose layout changes ends with exactly what a fresh member of the new layout reads.
func TestShardedMembersReadEveryObjectOnce(t *testing.T) {
	t.Run("client-side filter", func(t *testing.T) {
		testShardedMembers(t, env, "shard-client", scan.ShardClient)
	})
	t.Run("server-side selector", func(t *testing.T) {
		gated := envtestutil.StartRestartableForTest(t, [2]string{"feature-gates", "ShardedListAndWatch=true"})
		testShardedMembers(t, gated, "shard-server", scan.ShardServer)
	})
}

func testShardedMembers(t *testing.T, e *envtestutil.Env, prefix string, mode scan.ShardMode) {
	ctx := context.Background()
	// Names that differ in their last characters only hash close together (FNV-1a): distinct words spread.
	for _, word := range []string{"payments", "frontend", "backend", "monitoring", "ingress", "batch", "data", "ml",
		"search", "auth", "billing", "logging"} {
		ns := word + "-" + prefix
		if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", j)}}
			if err := e.Client.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	all := startMember(t, e, shard.Layout{}).objects(t)
	if len(all) < 12*4 {
		t.Fatalf("the unsharded scanner read %d objects, want at least %d", len(all), 12*4)
	}

	fresh := map[int][][]string{} // by count, each member's objects
	members := map[int][]member{}
	for _, count := range []int{3, 2} {
		var union []string
		for i := range count {
			m := startMember(t, e, shard.Layout{Index: i, Count: count, Epoch: 1})
			got := m.objects(t)
			if len(got) == 0 || len(got) == len(all) {
				t.Fatalf("member %d/%d read %d of %d objects: the objects are not split", i, count, len(got), len(all))
			}
			for _, gvr := range []schema.GroupVersionResource{configMaps, namespaces} {
				if m := scan.ShardModeOf(m.scanner, gvr); m != mode {
					t.Fatalf("member %d/%d reads %s in mode %q, want %q", i, count, gvr.Resource, m, mode)
				}
			}
			fresh[count] = append(fresh[count], got)
			members[count] = append(members[count], m)
			union = append(union, got...)
		}
		sort.Strings(union)
		if !slices.Equal(union, all) {
			t.Fatalf("the %d members read together (%d objects, duplicates included):\n %v\nthe unsharded scanner (%d):\n %v",
				count, len(union), union, len(all), all)
		}
	}

	// Resharding 3 -> 2: the first two members of three take the layout of two.
	for i, m := range members[3][:2] {
		m.scanner.SetShard(shard.Layout{Index: i, Count: 2, Epoch: 2})
	}
	for i, m := range members[3][:2] {
		if got, want := m.objects(t), fresh[2][i]; !slices.Equal(got, want) {
			t.Fatalf("member %d after the layout changed to %d/2 reads\n %v\na fresh member of %d/2 reads\n %v", i, i, got, i, want)
		}
	}
}
