package faults_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/celaudit/celaudit/test/envtestutil"
)

// TestAPIServerRestartDuringFirstAudit stops the API server while the operator reads the second page of its
// first LIST of configmaps, and starts it again once the operator has seen it gone. The operator picks the
// audit up again by itself; objects changed once the API server is back are audited, and its reports equal
// a fresh audit of the final state.
func TestAPIServerRestartDuringFirstAudit(t *testing.T) {
	env := envtestutil.StartRestartableForTest(t)
	id := env.ShippedIdentity(t)
	c := cluster{namespaces: []string{"restart-a", "restart-b", "restart-c"}, perNS: 12}
	c.create(t, env.Client)

	requests := &envtestutil.RequestLog{}
	reading, stopped := make(chan struct{}), make(chan struct{})
	var first bool
	requests.Before = func(r envtestutil.Request) {
		if r.Verb == "list" && r.Resource == "configmaps" && r.Query.Get("continue") != "" && !first {
			first = true
			close(reading)
			<-stopped // the second page is asked for once the API server is down
		}
	}
	o := options()
	o.Logger = (&logLines{}).logger(t)
	op, stop := envtestutil.StartOperator(t, requests.Wrap(id.Config), o)

	select {
	case <-reading:
	case <-time.After(2 * time.Minute):
		t.Fatal("the operator read no second page of configmaps")
	}
	if op.Settled() {
		t.Fatal("the first audit ended before it read its second page of configmaps")
	}
	env.StopAPIServer(t)
	down := time.Now()
	close(stopped)
	// The API server is started again once the operator has failed to reach it.
	envtestutil.Eventually(t, time.Minute, func() error {
		if len(requests.Requests(func(r envtestutil.Request) bool { return r.Status == 0 && r.Sent.After(down) })) == 0 {
			return errNoFailedRequest
		}
		return nil
	})
	env.StartAPIServer(t)

	changeConfigMaps(t, env, c.namespaces[1])
	envtestutil.WaitSettled(t, op)
	waitFailures(t, env, c.namespaces, c.failures()+1)
	assertPaginated(t, configMapLists(requests))
	if got := requests.Requests(func(r envtestutil.Request) bool {
		return r.Resource == "policyreports" && r.Verb == "create" && r.Status == http.StatusOK && r.Sent.Before(down)
	}); len(got) != 0 {
		t.Errorf("%d reports were written before the first audit ended", len(got))
	}
	stop()
	envtestutil.AssertFreshAuditAgrees(t, env.Client, id.Config, options(), c.namespaces...)
}

type stringError string

func (e stringError) Error() string { return string(e) }

// errNoFailedRequest: the operator has made no request since the API server stopped.
const errNoFailedRequest = stringError("the operator has not tried to reach the stopped API server yet")
