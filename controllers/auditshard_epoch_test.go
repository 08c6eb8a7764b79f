package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/shard"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// TestShardedMemberLeavesLaterEpoch: a member of layout 0/2 at epoch 3 owns two namespaces. In one of them a
// report written under epoch 5 (by a member of a later layout, which this one has not learnt of) is left as
// it is, as is its AuditShard written under epoch 5; the report of the other namespace it writes, under
// epoch 3.
func TestShardedMemberLeavesLaterEpoch(t *testing.T) {
	const (
		name  = "shep-owner"
		label = "shep"
	)
	ctx := context.Background()
	layout := shard.Layout{Index: 0, Count: 2, Epoch: 3}
	id := env.ShippedIdentity(t)
	t.Cleanup(func() {
		_ = env.Client.DeleteAllOf(context.Background(), &v1alpha1.AuditShard{}, client.InNamespace(id.Namespace))
	})

	// Two namespaces the member owns, with a ConfigMap without an owner each.
	var owned []string
	for k := 0; len(owned) < 2 && k < 26; k++ {
		if ns := fmt.Sprintf("%c-shep", 'a'+k); layout.OwnsNamespace(ns) {
			owned = append(owned, ns)
		}
	}
	if len(owned) < 2 {
		t.Fatalf("fixture: member %s owns %v of the candidate namespaces", layout, owned)
	}
	guarded, written := owned[0], owned[1]
	for _, ns := range owned {
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}})
		deleteAfter(t, namespace(ns))
		create(t, configMap(ns, "orphan", map[string]string{"a": "b"}))
	}
	later := map[string]string{shard.EpochAnnotation: "5", shard.MemberAnnotation: "1/3"}
	stored := &v1alpha2.PolicyReport{ObjectMeta: metav1.ObjectMeta{Namespace: guarded, Name: "celaudit-later",
		Labels: map[string]string{report.ManagedByLabel: report.ManagedByValue}, Annotations: later}}
	create(t, stored)
	as := &v1alpha1.AuditShard{ObjectMeta: metav1.ObjectMeta{Namespace: id.Namespace, Name: "shard-0"}}
	create(t, as)
	as.Status = v1alpha1.AuditShardStatus{Index: 0, Count: 3, Epoch: 5, Stripes: 1,
		Ranges: []v1alpha1.HashRange{{Start: "0x0000000000000000", End: "0x5555555555555555"}}}
	if err := env.Client.Status().Update(ctx, as); err != nil {
		t.Fatal(err)
	}
	deleteAuditPolicyAfter(t, name)
	create(t, ownerAuditPolicy(name, label, "every ConfigMap needs an owner"))

	opts := auditPolicyOptions()
	opts.LeaderElect, opts.LeaderElectionNS = true, id.Namespace
	opts.Shard = shard.Static(layout)
	logs := &lockedLines{}
	// Verbosity 1: the publisher says at V(1) that it leaves an AuditShard of a later epoch.
	opts.Logger = funcr.New(func(prefix, args string) { logs.add(prefix + " " + args) }, funcr.Options{Verbosity: 1})
	requests := &envtestutil.RequestLog{}
	envtestutil.StartOperator(t, requests.Wrap(id.Config), opts)

	// The member audits and writes: the report of the other namespace, under its own epoch.
	envtestutil.Eventually(t, 2*time.Minute, func() error {
		list := &v1alpha2.PolicyReportList{}
		if err := env.Client.List(ctx, list, client.InNamespace(written), client.MatchingLabels{report.ManagedByLabel: report.ManagedByValue}); err != nil {
			return err
		}
		for _, r := range list.Items {
			for _, res := range r.Results {
				if len(res.Resources) > 0 && res.Resources[0].Name == "orphan" && res.Result == v1alpha2.StatusWarn {
					if e, ok := shard.EpochOf(&r); !ok || e != layout.Epoch {
						return fmt.Errorf("report %s/%s written under epoch %d (%t), want %d", r.Namespace, r.Name, e, ok, layout.Epoch)
					}
					return nil
				}
			}
		}
		return fmt.Errorf("no report in %s warns of the orphan yet: %d reports", written, len(list.Items))
	})
	// Both guards are met, the report reconciler's and the publisher's (they log it), unless a write already
	// went past one of them.
	lines := []string{"A report was written under a later shard layout", "A member of a later epoch holds this member's AuditShard"}
	envtestutil.Eventually(t, time.Minute, func() error {
		if laterEpochWrites(requests, guarded) != nil {
			return nil
		}
		for _, line := range lines {
			if len(logs.containing(line)) == 0 {
				return fmt.Errorf("the member has not logged %q", line)
			}
		}
		return nil
	})
	for _, r := range laterEpochWrites(requests, guarded) {
		t.Errorf("the member of epoch 3 sent %s %s %s/%s (status %d)", r.Verb, r.Resource, r.Namespace, r.Name, r.Status)
	}
	list := &v1alpha2.PolicyReportList{}
	if err := env.Client.List(ctx, list, client.InNamespace(guarded)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != stored.Name || list.Items[0].ResourceVersion != stored.ResourceVersion {
		t.Errorf("the reports of %s, whose report has epoch 5, changed: %d reports: %s", guarded, len(list.Items), describeReports(list.Items))
	}
	got := &v1alpha1.AuditShard{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(as), got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != as.ResourceVersion || got.Status.Epoch != 5 {
		t.Errorf("the AuditShard of epoch 5 was written by a member of epoch 3: %+v", got.Status)
	}
}

// laterEpochWrites returns the writes the member sent of the reports of namespace guarded or of AuditShards.
func laterEpochWrites(requests *envtestutil.RequestLog, guarded string) []envtestutil.Request {
	return requests.Requests(func(r envtestutil.Request) bool {
		return r.Verb != "get" && r.Verb != "list" && r.Verb != "watch" &&
			((r.Resource == "policyreports" && r.Namespace == guarded) || r.Resource == "auditshards")
	})
}

// describeReports names reports with their resourceVersion and epoch annotation.
func describeReports(reports []v1alpha2.PolicyReport) string {
	out := ""
	for _, r := range reports {
		out += fmt.Sprintf("%s (resourceVersion %s, epoch %q) ", r.Name, r.ResourceVersion, r.Annotations[shard.EpochAnnotation])
	}
	return out
}
