package controllers

import (
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/celaudit/celaudit/internal/fence"
)

// leaderElectionID names the Lease the replicas elect their leader with.
const leaderElectionID = "celaudit.celaudit.io"

// inClusterNamespace is where a pod finds its namespace, the Lease's when --leader-election-namespace is unset.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// election is celaudit's leader election: the lock the manager elects with, and the fence every write of
// the manager's clients passes, so that a leader that may have lost its lease (paused, cut off) writes
// nothing, whatever it believes. Its zero value, when --leader-elect is off, fences nothing.
type election struct {
	lock  resourcelock.Interface
	fence *fence.Fence
	// events records the elector's Events on the Lease ("became leader"): its recorder is the manager's,
	// which is made after the lock.
	events *leaseEvents
}

// checkLeaderElection checks the timing of leader election as client-go's elector does, naming the flags,
// so that a wrong value fails at start rather than when the manager starts electing.
func (o Options) checkLeaderElection() error {
	switch {
	case !o.LeaderElect:
		return nil
	case o.LeaseDuration < time.Second || o.LeaseDuration%time.Second != 0:
		// The Lease records whole seconds: a fraction would be dropped, and a standby take over earlier.
		return fmt.Errorf("--leader-election-lease-duration must be a whole number of seconds, got %s", o.LeaseDuration)
	case o.RenewDeadline <= 0 || o.RenewDeadline >= o.LeaseDuration:
		return fmt.Errorf("--leader-election-renew-deadline (%s) must be positive and shorter than --leader-election-lease-duration (%s)",
			o.RenewDeadline, o.LeaseDuration)
	case o.RetryPeriod <= 0 || o.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(o.RetryPeriod)):
		return fmt.Errorf("--leader-election-retry-period (%s) must be positive and, times %v, shorter than --leader-election-renew-deadline (%s)",
			o.RetryPeriod, leaderelection.JitterFactor, o.RenewDeadline)
	}
	return nil
}

// newElection makes the lock, with cfg, which is not fenced: the lease must be renewable when the fence is
// closed. The lock is controller-runtime's own (a Lease with a unique identity, clients that time out
// before the renew deadline), wrapped to tell the fence of each renewal.
//
// In a sharded audit every member writes its reports and Events whether it leads or not: the fence lets those
// through (a report's single writer is its namespace's owner, and epochs order owners across layouts).
func newElection(cfg *rest.Config, o Options, sharded bool) (*election, error) {
	if !o.LeaderElect {
		return &election{}, nil
	}
	namespace, err := leaseNamespace(o.LeaderElectionNS)
	if err != nil {
		return nil, err
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("naming this replica for leader election: %w", err)
	}
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	// One slow answer must not use up the renew deadline.
	cfg.Timeout = max(o.RenewDeadline/2, time.Second)
	leases, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the leader election client: %w", err)
	}
	events := &leaseEvents{}
	f := fence.New(o.RenewDeadline, time.Now)
	if sharded {
		f.Exempt(memberWrites()...)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: leaderElectionID},
		Client:     leases,
		LockConfig: resourcelock.ResourceLockConfig{Identity: host + "_" + string(uuid.NewUUID()), EventRecorder: events},
	}
	return &election{lock: &fence.Lock{Interface: lock, Fence: f}, fence: f, events: events}, nil
}

// leaseNamespace returns the namespace of the Lease: the flag's, or the pod's.
func leaseNamespace(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	data, err := os.ReadFile(inClusterNamespace)
	if err != nil {
		return "", fmt.Errorf("--leader-election-namespace is needed outside a pod (reading the pod's namespace: %w)", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// fenced returns cfg, behind the fence when there is one.
func (e *election) fenced(cfg *rest.Config) *rest.Config {
	if e.fence == nil {
		return cfg
	}
	return e.fence.Wrap(cfg)
}

// leaseEvents records the elector's Events through an EventRecorder set once the manager exists; none before.
type leaseEvents struct {
	recorder EventRecorder
}

var _ resourcelock.EventRecorder = &leaseEvents{}

// Eventf records an Event of the elector about its Lease.
func (e *leaseEvents) Eventf(obj k8sruntime.Object, eventType, reason, message string, args ...any) {
	if e.recorder != nil {
		e.recorder.Eventf(obj, nil, eventType, reason, "LeaderElection", message, args...)
	}
}
