package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/celaudit/celaudit/internal/audit"
)

// crdReconciler keeps one compiled policy per audited CRD registered with the scanner. A CRD is compiled
// again only when its uid, generation or celaudit annotations change.
//
// Reconciles of one CRD never overlap (the work queue hands out each key to one worker at a time), so the
// compile runs without a lock; the lock only guards the map of what was compiled, which reconciles of other
// CRDs share.
type crdReconciler struct {
	Client   client.Client
	Registry policyRegistry
	// Compile builds the policy of one CRD.
	Compile func(*apiextensionsv1.CustomResourceDefinition) audit.Policy
	// Audited tells whether a CRD is audited at all (for example, not celaudit's own report CRDs).
	Audited func(*apiextensionsv1.CustomResourceDefinition) bool
	// Resync is the default interval of the periodic rescan; zero disables it.
	Resync  time.Duration
	Startup *startupGate
	Clock   clock.PassiveClock
	// Changed, when set, is called on every CRD event: the served resources may have changed.
	Changed func()
	// Warnings records the Warning Events of CRDs whose rules do not compile.
	Warnings *warnings

	mu       sync.Mutex
	compiled map[string]compiledCRD
}

type compiledCRD struct {
	uid         types.UID
	generation  int64
	annotations string
	scanned     time.Time
}

// sameSource reports whether c was compiled from the same CRD content as o.
func (c compiledCRD) sameSource(o compiledCRD) bool {
	return c.uid == o.uid && c.generation == o.generation && c.annotations == o.annotations
}

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// The objects celaudit audits are read under the resource-reader ClusterRole (config/rbac/resource_reader_role.yaml),
// not under a marker here: its rules are the install's choice, all of them or the built-in kinds only (see
// config/components/restricted-read), and the generated manager-role holds what celaudit needs in both.

// Reconcile compiles a CRD's validation into a policy, or removes the policy of a CRD that is gone.
func (r *crdReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	defer r.Startup.Reconciled(audit.CRDKey(req.Name))
	if r.Changed != nil {
		r.Changed()
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := r.Client.Get(ctx, req.NamespacedName, crd); err != nil {
		if apierrors.IsNotFound(err) {
			r.remove(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting CustomResourceDefinition %s: %w", req.Name, err)
	}
	return r.reconcile(ctx, crd), nil
}

func (r *crdReconciler) reconcile(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) ctrl.Result {
	if !crd.DeletionTimestamp.IsZero() || !r.Audited(crd) || !established(crd) {
		r.remove(crd.Name)
		return ctrl.Result{}
	}
	ann := audit.ParseAnnotations(crd.Annotations)
	interval := ann.ResyncOr(r.Resync)
	now := r.Clock.Now()
	want := compiledCRD{uid: crd.UID, generation: crd.Generation, annotations: ann.Signature, scanned: now}
	have, ok := r.lookup(crd.Name)
	switch {
	case !ok || !have.sameSource(want):
		ctrl.LoggerFrom(ctx).V(1).Info("Compiling CRD validation", "generation", crd.Generation)
		p := r.Compile(crd)
		if c, ok := p.(compileProblems); ok {
			r.Warnings.compileFailed(crd, kindCRD, c.Problems())
		}
		r.store(crd.Name, want)
		r.Registry.SetPolicy(p)
		have = want
	case interval > 0 && now.Sub(have.scanned) >= interval:
		r.Registry.Rescan(audit.CRDKey(crd.Name), "")
		have.scanned = now
		r.store(crd.Name, have)
	}
	return requeueIn(interval, now.Sub(have.scanned))
}

func (r *crdReconciler) lookup(name string) (compiledCRD, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.compiled[name]
	return c, ok
}

func (r *crdReconciler) store(name string, c compiledCRD) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.compiled == nil {
		r.compiled = map[string]compiledCRD{}
	}
	r.compiled[name] = c
}

func (r *crdReconciler) remove(name string) {
	r.mu.Lock()
	delete(r.compiled, name)
	r.mu.Unlock()
	r.Warnings.forget(kindCRD, name)
	r.Registry.RemovePolicy(audit.CRDKey(name))
}

// listAtStartup tells the start-up gate which CRDs the synced cache holds.
func (r *crdReconciler) listAtStartup(ctx context.Context) error {
	return r.Startup.ListFrom(ctx, r.Client, audit.SourceCRD, &apiextensionsv1.CustomResourceDefinitionList{})
}

// SetupWithManager registers the reconciler and its start-up listing with mgr.
func (r *crdReconciler) SetupWithManager(mgr ctrl.Manager, opts ...func(*ctrl.Builder) *ctrl.Builder) error {
	if r.Client == nil || r.Registry == nil || r.Compile == nil || r.Startup == nil || r.Warnings == nil {
		return fmt.Errorf("crdReconciler needs Client, Registry, Compile, Startup and Warnings")
	}
	if r.Audited == nil {
		r.Audited = func(*apiextensionsv1.CustomResourceDefinition) bool { return true }
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return ctx.Err()
		}
		return r.listAtStartup(ctx)
	}))
	if err != nil {
		return fmt.Errorf("adding CRD start-up listing: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).For(&apiextensionsv1.CustomResourceDefinition{}).Named("customresourcedefinition")
	for _, o := range opts {
		b = o(b)
	}
	return b.Complete(r)
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// requeueIn returns the result that brings a reconcile back when the policy's periodic rescan is due.
func requeueIn(interval, elapsed time.Duration) ctrl.Result {
	if interval <= 0 {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: max(interval-elapsed, time.Second)}
}
