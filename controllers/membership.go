package controllers

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	auditv1alpha1 "github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/internal/shard"
)

// membership is this replica's place in a sharded audit, as the options give it. Its zero value is no
// sharding: one replica (the leader, with leader election) audits everything.
type membership struct {
	// source tells the layout; nil when the audit is not sharded.
	source shard.Source
	// statefulSet is set when the members are the pods of a StatefulSet, which source follows.
	statefulSet *statefulSetMembership
	// scanned is the layout the scanner was last given (see setupMembership).
	scanned *atomic.Pointer[shard.Layout]
	// namespace is the operator's own, where every member publishes its AuditShard and the leader reads them
	// all: the StatefulSet's, or else the Lease's.
	namespace string
}

// scanning reports whether the scanner reads under the current layout: between a layout change and the
// scanner being told, the results are still those of the previous layout, and reports wait.
func (m membership) scanning() bool {
	if !m.sharded() {
		return true
	}
	l, known := m.source.Layout()
	scanned := m.scanned.Load()
	return known && scanned != nil && *scanned == l
}

// sharded reports whether this replica is a member of a sharded audit: every member audits and writes the
// reports of what it owns, leader or not.
func (m membership) sharded() bool { return m.source != nil }

// membership checks the --shard-* flags and returns the membership they make. A sharded audit needs leader
// election: the leader alone writes what sums up every member's share (the AuditPolicies' status, their
// admission policies).
func (o Options) membership() (membership, error) {
	m, err := o.members()
	if err != nil || !m.sharded() {
		return m, err
	}
	if !o.LeaderElect {
		return membership{}, fmt.Errorf("a sharded audit needs --leader-elect: the leader alone writes the AuditPolicies' status and registers their admission policies")
	}
	if set := m.statefulSet; set != nil {
		m.namespace = set.Namespace
		return m, nil
	}
	if m.namespace, err = leaseNamespace(o.LeaderElectionNS); err != nil {
		return membership{}, err
	}
	return m, nil
}

// members returns the membership of the --shard-* flags, or of Shard.
func (o Options) members() (membership, error) {
	static := o.ShardIndex.Given || o.ShardCount.Given
	switch {
	case o.Shard != nil && (static || o.ShardStatefulSet != ""):
		return membership{}, fmt.Errorf("the options set a shard source and the --shard-* flags: use one")
	case o.Shard != nil:
		return membership{source: o.Shard, scanned: &atomic.Pointer[shard.Layout]{}}, nil
	case static && o.ShardStatefulSet != "":
		return membership{}, fmt.Errorf("--shard-statefulset (members from a StatefulSet) and --shard-index/--shard-count (fixed members) exclude each other")
	case static:
		return o.staticMembership()
	case o.ShardStatefulSet != "":
		return o.statefulSetMembership()
	}
	return membership{}, nil
}

// staticMembership returns the fixed membership of --shard-index and --shard-count.
func (o Options) staticMembership() (membership, error) {
	switch {
	case !o.ShardIndex.Given:
		return membership{}, fmt.Errorf("--shard-count=%d needs --shard-index, this replica's index among the members", o.ShardCount.N)
	case !o.ShardCount.Given:
		return membership{}, fmt.Errorf("--shard-index=%d needs --shard-count, the number of members", o.ShardIndex.N)
	case o.ShardCount.N < 1:
		return membership{}, fmt.Errorf("--shard-count must be at least 1, got %d", o.ShardCount.N)
	case o.ShardIndex.N < 0 || o.ShardIndex.N >= o.ShardCount.N:
		return membership{}, fmt.Errorf("--shard-index must be in 0..%d (--shard-count=%d), got %d", o.ShardCount.N-1, o.ShardCount.N, o.ShardIndex.N)
	}
	l := shard.Layout{Index: o.ShardIndex.N, Count: o.ShardCount.N}
	return membership{source: shard.Static(l), scanned: &atomic.Pointer[shard.Layout]{}}, nil
}

// statefulSetMembership returns the membership of --shard-statefulset: this pod's ordinal in it, the layout
// not known until the StatefulSet is read.
func (o Options) statefulSetMembership() (membership, error) {
	set := o.ShardStatefulSet
	if o.PodName == "" {
		return membership{}, fmt.Errorf("--shard-statefulset=%s needs this pod's name, whose ordinal is its index: set --pod-name or $POD_NAME (the downward API's metadata.name)", set)
	}
	ordinal, err := shard.Ordinal(set, o.PodName)
	if err != nil {
		return membership{}, fmt.Errorf("--shard-statefulset: %w", err)
	}
	namespace := o.PodNamespace
	if namespace == "" {
		data, err := os.ReadFile(inClusterNamespace)
		if err != nil {
			return membership{}, fmt.Errorf("--shard-statefulset needs the StatefulSet's namespace outside a pod: set --pod-namespace or $POD_NAMESPACE (reading the pod's namespace: %w)", err)
		}
		namespace = strings.TrimSpace(string(data))
	}
	m := &statefulSetMembership{Namespace: namespace, Name: set, Ordinal: ordinal, Layouts: &shard.Dynamic{}}
	return membership{source: m.Layouts, statefulSet: m, scanned: &atomic.Pointer[shard.Layout]{}}, nil
}

// statefulSetMembership keeps a member's layout from the StatefulSet whose pods are the members: the index
// is the pod's ordinal, the count the StatefulSet's spec.replicas, the epoch its metadata.generation, which
// scaling raises. The StatefulSet is watched, not polled; a pod whose ordinal is not below the count (being
// scaled away) owns nothing.
type statefulSetMembership struct {
	Namespace, Name string
	Ordinal         int
	Layouts         *shard.Dynamic
	// Client reads the StatefulSet from the cache, which holds it alone; APIReader from the API server, when
	// a report written under a higher epoch says that the cache is behind.
	Client    client.Reader
	APIReader client.Reader
}

func (m *statefulSetMembership) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, m.read(ctx, m.Client)
}

// Refresh reads the StatefulSet from the API server and sets the layout from it: a report written under a
// higher epoch than this member's says that the membership changed and the watch has yet to tell.
func (m *statefulSetMembership) Refresh(ctx context.Context) error {
	return m.read(ctx, m.APIReader)
}

// read sets the layout from the StatefulSet as r holds it. A StatefulSet gone leaves the layout as it was:
// its pods, this one included, are being deleted with it.
func (m *statefulSetMembership) read(ctx context.Context, r client.Reader) error {
	set := &appsv1.StatefulSet{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Name}, set); err != nil {
		if apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).Info("The StatefulSet of the shard members is not found: the layout stays as it was",
				"statefulSet", m.Namespace+"/"+m.Name)
			return nil
		}
		return fmt.Errorf("reading StatefulSet %s/%s, whose pods are the shard members: %w", m.Namespace, m.Name, err)
	}
	l := m.layoutOf(set)
	if before, known := m.Layouts.Layout(); !known || before != l {
		ctrl.LoggerFrom(ctx).Info("Shard layout", "layout", l.String(), "ordinal", m.Ordinal,
			"replicas", l.Count, "epoch", l.Epoch, "ranges", shard.FormatRanges(l.Ranges()))
	}
	m.Layouts.Set(l)
	return nil
}

// layoutOf returns this member's layout in set. An older generation than the one known (a stale read) keeps
// the known layout: epochs never go back.
func (m *statefulSetMembership) layoutOf(set *appsv1.StatefulSet) shard.Layout {
	if known, ok := m.Layouts.Layout(); ok && known.Epoch > set.Generation {
		return known
	}
	return shard.Member(m.Ordinal, int(ptr.Deref(set.Spec.Replicas, 1)), set.Generation)
}

// cacheOptions restricts the cache's StatefulSets to the members' one: the namespaced Role of
// config/components/sharding/shard_membership_role.yaml allows no more.
func (m *statefulSetMembership) cacheOptions() cache.ByObject {
	return cache.ByObject{
		Namespaces: map[string]cache.Config{m.Namespace: {}},
		Field:      fields.OneTermEqualSelector("metadata.name", m.Name),
	}
}

// SetupWithManager watches the StatefulSet, on every replica: the membership is what each member needs
// before it audits anything, leader or not.
func (m *statefulSetMembership) SetupWithManager(mgr ctrl.Manager, o Options) error {
	m.Client, m.APIReader = mgr.GetClient(), mgr.GetAPIReader()
	return ctrl.NewControllerManagedBy(mgr).For(&appsv1.StatefulSet{}).Named("shard-membership").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), SkipNameValidation: ptr.To(o.SkipControllerChecks)}).
		Complete(m)
}

// everyMember runs a runnable on every replica, leader or not: in a sharded audit each member audits and
// writes the reports of what it owns.
type everyMember struct{ manager.Runnable }

// NeedLeaderElection is false: see everyMember.
func (everyMember) NeedLeaderElection() bool { return false }

// memberManager is a manager whose runnables, controllers included, run on every replica.
type memberManager struct{ ctrl.Manager }

// Add adds r to run on every replica.
func (m memberManager) Add(r manager.Runnable) error { return m.Manager.Add(everyMember{r}) }

// forMembers returns mgr, or, in a sharded audit, mgr running what it is given on every replica.
func forMembers(mgr ctrl.Manager, m membership) ctrl.Manager {
	if !m.sharded() {
		return mgr
	}
	return memberManager{mgr}
}

// memberWrites are the resources every member of a sharded audit writes whether it leads or not: its
// reports, of either API, its AuditShard (each member writes its own, the update conditional on its
// resourceVersion and refused over a later epoch), and Events.
func memberWrites() []schema.GroupResource {
	out := []schema.GroupResource{{Resource: "events"}, {Group: "events.k8s.io", Resource: "events"},
		auditv1alpha1.GroupVersion.WithResource("auditshards").GroupResource()}
	for _, api := range []reportAPI{wgpolicyAPI{}, openReportsAPI{}} {
		namespaced, cluster := api.kinds()
		for _, gvk := range []schema.GroupVersionKind{namespaced, cluster} {
			plural, _ := meta.UnsafeGuessKindToResource(gvk)
			out = append(out, plural.GroupResource())
		}
	}
	return out
}

// releaseMember releases the scanner once the start-up gate is open and, in a sharded audit, this member's
// layout is known and owns something: its first LIST already carries its ranges. Release is idempotent.
func releaseMember(sc *scan.Scanner, startup *startupGate, members membership) {
	if !startup.Open() {
		return
	}
	if members.sharded() {
		if l, known := members.source.Layout(); !known || l.None {
			return
		}
	}
	sc.Release()
}

// memberReady returns why a member of a sharded audit is not ready yet: its layout is not known. A member
// that owns nothing (a pod being scaled away) has nothing to audit.
func memberReady(members membership) error {
	if _, known := members.source.Layout(); known {
		return nil
	}
	if set := members.statefulSet; set != nil {
		return fmt.Errorf("shard layout not known yet: reading StatefulSet %s/%s", set.Namespace, set.Name)
	}
	return fmt.Errorf("shard layout not known yet")
}

// setupMembership wires a sharded audit's membership: the StatefulSet watch that sets the layout, and what
// each layout changes. The scanner reads the namespaces the layout owns (and relists on a change), is
// released once the first layout is known, and the report reconcilers look at every namespace again: they
// rewrite those now owned once the relist is done, and stop touching the others.
func setupMembership(mgr ctrl.Manager, o Options, members membership, a *auditParts, apis []reportAPI) error {
	if !members.sharded() {
		return nil
	}
	if set := members.statefulSet; set != nil {
		if err := set.SetupWithManager(mgr, o); err != nil {
			return fmt.Errorf("setting up the shard membership: %w", err)
		}
	}
	apply := func(l shard.Layout) {
		// A layout that owns nothing stops every read (see scan.Scanner.SetShard).
		a.scan.SetShard(l)
		members.scanned.Store(&l)
		releaseMember(a.scan, a.startup, members)
		for _, ns := range a.store.Namespaces() {
			a.notifier.Notify(ns)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, api := range apis {
			namespaces, err := api.namespaces(ctx, mgr.GetClient())
			if err != nil {
				mgr.GetLogger().Error(err, "Listing the namespaces of celaudit's reports after a shard layout change")
				continue
			}
			for _, ns := range namespaces {
				a.notifier.Notify(ns)
			}
		}
	}
	members.source.Subscribe(apply)
	if l, known := members.source.Layout(); known {
		// Static, or set before: the scanner's first LIST carries the range.
		a.scan.SetShard(l)
		members.scanned.Store(&l)
	}
	return nil
}
