package faults_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/celaudit/celaudit/test/envtestutil"
)

// outage is how long the API server stays down: long enough for a write retried each second to fail thirty
// times, and for a backoff that doubles from one second to reach 32 s: writes that only waited for their
// backoff would go about 25 s after the API server is back.
const outage = 35 * time.Second

// TestAPIServerUnreachable stops the API server as the operator writes the reports of its first audit, and
// starts it again after a while. Meanwhile the report writes back off (a handful of attempts per namespace,
// not one a second), the failure is logged once (not once per retry, and not with a stack trace), and once
// the API server is back the reports are written within seconds, not when the backoff ends, equal to a fresh
// audit.
func TestAPIServerUnreachable(t *testing.T) {
	env := envtestutil.StartRestartableForTest(t)
	id := env.ShippedIdentity(t)
	c := cluster{namespaces: []string{"down-a", "down-b"}, perNS: 12}
	c.create(t, env.Client)

	requests := &envtestutil.RequestLog{}
	writing, stopped := make(chan struct{}), make(chan struct{})
	var first bool
	requests.Before = func(r envtestutil.Request) {
		if r.Resource == "policyreports" && r.Verb == "create" && !first {
			first = true
			close(writing)
			<-stopped // the first report write leaves once the API server is down
		}
	}
	logs := &logLines{}
	o := options()
	o.Logger = logs.logger(t)
	_, stop := envtestutil.StartOperator(t, requests.Wrap(id.Config), o)

	select {
	case <-writing:
	case <-time.After(2 * time.Minute):
		t.Fatal("the operator wrote no report")
	}
	env.StopAPIServer(t)
	down, logged := time.Now(), logs.count()
	close(stopped)
	<-time.After(outage) // the fault itself: the API server stays down this long
	during := logs.since(logged)
	env.StartAPIServer(t)
	up := time.Now()

	// The reports are written as soon as the API server is back.
	waitFailures(t, env, c.namespaces, c.failures())
	if took := time.Since(up); took > 8*time.Second {
		t.Errorf("the reports were written %s after the API server was back, want within 8s", took.Round(time.Second))
	}

	// Each namespace's writes backed off: 1+2+4+8+16 s fit in the outage, so about six attempts each.
	for _, ns := range c.namespaces {
		failed := requests.Requests(func(r envtestutil.Request) bool {
			return r.Resource == "policyreports" && r.Namespace == ns && r.Verb != "list" && r.Verb != "watch" &&
				r.Verb != "get" && r.Status == 0 && r.Sent.After(down)
		})
		if len(failed) > 8 {
			t.Errorf("the reports of %s were written %d times while the API server was down for %s, want at most 8 (backoff)",
				ns, len(failed), outage)
		}
	}

	// The cause is logged once when it begins, once when it ends, and nothing logs an error on every retry.
	if got := matching(during, "Writes to the API server fail"); len(got) != 1 {
		t.Errorf("the failing writes were logged %d times during the outage, want once:\n%s", len(got), strings.Join(got, "\n"))
	}
	if got := matching(during, `"error"=`); len(got) > 5 {
		t.Errorf("%d errors were logged during an outage of %s, want a handful at most:\n%s", len(got), outage, strings.Join(got, "\n"))
	}
	envtestutil.Eventually(t, time.Minute, func() error {
		if got := matching(logs.since(logged), "Writes to the API server succeed again"); len(got) != 1 {
			return fmt.Errorf("the end of the failures was logged %d times, want once", len(got))
		}
		return nil
	})
	stop()
	envtestutil.AssertFreshAuditAgrees(t, env.Client, id.Config, options(), c.namespaces...)
}
