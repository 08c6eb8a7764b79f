package controllers_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/internal/shard"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// readyz returns the status and body of GET /readyz?verbose on the probes at address, as the kubelet asks.
func readyz(address string) (int, string, error) {
	resp, err := http.Get("http://" + address + "/readyz?verbose")
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestShardedMemberReadiness: a member that does not lead (a holder outside celaudit keeps the Lease) is not
// ready while its first audit is in progress, unlike an unsharded standby, which is ready at once: it audits
// its share whether it leads or not. It is ready once its first audit is done, still not leading.
func TestShardedMemberReadiness(t *testing.T) {
	const (
		name  = "shrd-owner"
		label = "shrd"
	)
	id := env.ShippedIdentity(t)
	holdLease(t, id.Namespace, "outside-celaudit")
	t.Cleanup(func() {
		ctx := context.Background()
		_ = env.Client.DeleteAllOf(ctx, &v1alpha1.AuditShard{}, client.InNamespace(id.Namespace))
		_ = client.IgnoreNotFound(env.Client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: id.Namespace, Name: electionLease}}))
	})
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a-shrd", Labels: map[string]string{label: "yes"}}})
	deleteAfter(t, namespace("a-shrd"))
	create(t, configMap("a-shrd", "orphan", map[string]string{"a": "b"}))
	deleteAuditPolicyAfter(t, name)
	create(t, ownerAuditPolicy(name, label, "every ConfigMap needs an owner"))

	// The AuditPolicy's compile is held back: the first audit, which waits for every policy, is not done.
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	opts := auditPolicyOptions()
	opts.LeaderElect, opts.LeaderElectionNS = true, id.Namespace
	opts.Shard = shard.Static(shard.Layout{Index: 0, Count: 2})
	opts.ProbeAddr = freeAddress(t)
	controllers.HoldVAPCompile(&opts, func(policy string) {
		if !strings.Contains(policy, name) {
			return
		}
		select {
		case held <- struct{}{}:
		default:
		}
		<-release
	})
	op, _ := envtestutil.StartOperator(t, id.Config, opts)
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the operator stops

	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("the AuditPolicy was not compiled within a minute")
	}
	envtestutil.Eventually(t, 30*time.Second, func() error {
		code, body, err := readyz(opts.ProbeAddr)
		if err != nil {
			return err
		}
		if code != http.StatusInternalServerError || !strings.Contains(body, "[-]audit failed") {
			return fmt.Errorf("/readyz answered %d while the first audit is held back, want %d with the audit check failing:\n%s",
				code, http.StatusInternalServerError, body)
		}
		return nil
	})
	if op.Settled() {
		t.Fatal("the first audit is done while a policy's compile is held back")
	}

	releaseOnce.Do(func() { close(release) })
	envtestutil.WaitSettled(t, op)
	envtestutil.Eventually(t, 30*time.Second, func() error {
		code, body, err := readyz(opts.ProbeAddr)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz answered %d after the first audit:\n%s", code, body)
		}
		return nil
	})
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: id.Namespace, Name: electionLease}, lease); err != nil {
		t.Fatal(err)
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "outside-celaudit" {
		t.Fatalf("the Lease is held by %q: the member was to stay a non-leader", holder)
	}
}
