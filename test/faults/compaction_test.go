package faults_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/celaudit/celaudit/test/envtestutil"
)

// configMapLists returns the LISTs of configmaps the operator made, in the order they were answered.
func configMapLists(log *envtestutil.RequestLog) []envtestutil.Request {
	return log.Requests(func(r envtestutil.Request) bool { return r.Verb == "list" && r.Resource == "configmaps" })
}

// TestEtcdCompaction compacts etcd twice under a running operator: between two pages of its first LIST of
// configmaps, so that the continue token expires, and while the API server is down, so that the watch's
// resourceVersion has expired when the watch reconnects. Both times the operator reads the configmaps again,
// page by page, never in one unpaginated LIST (client-go's pager falls back to one: at a million objects
// that is a memory cliff), and its reports end equal to a fresh audit. The API server reads the pages after
// the first from etcd, as API servers before 1.34 do (1.34 serves them from a snapshot of its watch cache,
// which a compaction of etcd does not expire).
func TestEtcdCompaction(t *testing.T) {
	env := envtestutil.StartRestartableForTest(t, [2]string{"feature-gates", "ListFromCacheSnapshot=false"})
	id := env.ShippedIdentity(t)
	c := cluster{namespaces: []string{"compact-a", "compact-b", "compact-c"}, perNS: 12}
	c.create(t, env.Client)
	ctx := context.Background()

	log := &envtestutil.RequestLog{}
	var compacted atomic.Bool
	log.Before = func(r envtestutil.Request) {
		if r.Verb == "list" && r.Resource == "configmaps" && r.Query.Get("continue") != "" && !compacted.Swap(true) {
			if _, err := env.CompactEtcd(ctx); err != nil {
				t.Errorf("compacting etcd: %v", err)
			}
		}
	}
	o := options()
	o.Logger = (&logLines{}).logger(t)
	op, stop := envtestutil.StartOperator(t, log.Wrap(id.Config), o)
	envtestutil.WaitSettled(t, op)
	waitFailures(t, env, c.namespaces, c.failures())

	// The continue token expired, and the LIST started over from the first page, paginated.
	lists := configMapLists(log)
	expired := -1
	for i, r := range lists {
		if r.Query.Get("continue") != "" && r.Status == http.StatusGone {
			expired = i
			break
		}
	}
	if expired < 0 {
		t.Fatalf("no LIST of configmaps was answered 410 Gone after etcd was compacted between pages; LISTs: %v", describe(lists))
	}
	if expired+1 >= len(lists) || lists[expired+1].Query.Get("continue") != "" {
		t.Fatalf("the LIST whose continue token expired was not started over from its first page; LISTs: %v", describe(lists))
	}
	assertPaginated(t, lists)

	// The watch's resourceVersion expires while the API server is down; objects change once it is back.
	before := len(lists)
	env.StopAPIServer(t)
	if _, err := env.CompactEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	env.StartAPIServer(t)
	changeConfigMaps(t, env, c.namespaces[0])
	waitFailures(t, env, c.namespaces, c.failures()+1)
	envtestutil.Eventually(t, time.Minute, func() error {
		for _, r := range configMapLists(log)[before:] {
			if r.Namespace == "" && r.Query.Get("continue") == "" && r.Status == http.StatusOK {
				return nil
			}
		}
		return fmt.Errorf("no full LIST of configmaps after the watch's resourceVersion expired")
	})
	assertPaginated(t, configMapLists(log))
	stop()
	envtestutil.AssertFreshAuditAgrees(t, env.Client, id.Config, options(), c.namespaces...)
}

// changeConfigMaps deletes a failing configmap of namespace, makes a passing one fail and adds a failing one:
// one failure more.
func changeConfigMaps(t *testing.T, env *envtestutil.Env, namespace string) {
	t.Helper()
	ctx := context.Background()
	envtestutil.Eventually(t, time.Minute, func() error {
		return env.Client.Delete(ctx, configMap(namespace, 0, true))
	})
	if err := env.Client.Update(ctx, configMap(namespace, 1, true)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, configMap(namespace, 100, true)); err != nil {
		t.Fatal(err)
	}
}

// assertPaginated fails unless every LIST has the scenario's page size as its limit.
func assertPaginated(t *testing.T, lists []envtestutil.Request) {
	t.Helper()
	for _, r := range lists {
		if r.Query.Get("limit") != "5" {
			t.Errorf("a LIST of configmaps was made without the page size as its limit (limit=%q, continue=%t)",
				r.Query.Get("limit"), r.Query.Get("continue") != "")
		}
	}
}

// describe summarizes LISTs for a failure message.
func describe(lists []envtestutil.Request) []string {
	var out []string
	for _, r := range lists {
		out = append(out, fmt.Sprintf("[ns=%q limit=%s continue=%t status=%d]", r.Namespace, r.Query.Get("limit"),
			r.Query.Get("continue") != "", r.Status))
	}
	return out
}

// waitFailures waits until the reports of namespaces list exactly want results.
func waitFailures(t *testing.T, env *envtestutil.Env, namespaces []string, want int) {
	t.Helper()
	envtestutil.Eventually(t, 90*time.Second, func() error {
		got, err := countResults(context.Background(), env.Client, namespaces)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("the reports list %d results, want %d", got, want)
		}
		return nil
	})
}
