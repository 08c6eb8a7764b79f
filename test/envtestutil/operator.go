package envtestutil

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/celaudit/celaudit/controllers"
)

// TestOptions returns operator options for tests: no metrics or probe listeners, several managers allowed in
// one process, and short report coalescing and readiness intervals.
func TestOptions() controllers.Options {
	o := controllers.DefaultOptions()
	o.MetricsAddr, o.ProbeAddr = "0", "0"
	o.SkipControllerChecks = true
	o.ReportCoalesce = 200 * time.Millisecond
	o.ReadinessInterval = 200 * time.Millisecond
	return o
}

// StartOperator runs celaudit against cfg until the test ends or the returned stop function is called.
func StartOperator(t testing.TB, cfg *rest.Config, opts controllers.Options) (*controllers.Operator, func()) {
	t.Helper()
	op, err := controllers.NewOperator(cfg, opts)
	if err != nil {
		t.Fatalf("creating operator: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Start(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator stopped with error: %v", err)
		}
	}
	t.Cleanup(stop)
	return op, stop
}

// Eventually calls check until it returns nil or timeout passes, then fails the test with the last error.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitSettled waits until the operator's first audit is done.
func WaitSettled(t testing.TB, op *controllers.Operator) {
	t.Helper()
	Eventually(t, time.Minute, func() error {
		if !op.Settled() {
			return fmt.Errorf("operator not settled")
		}
		return nil
	})
}
