package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
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

// Annotations that steer the audit of one CRD or policy.
const (
	// AnnotationRescan: any change of its value triggers a full rescan of the policy.
	AnnotationRescan = "celaudit.io/rescan"
	// AnnotationResyncInterval overrides the periodic resync interval of the policy (a Go duration).
	AnnotationResyncInterval = "celaudit.io/resync-interval"
)

// CRDSource names the CRD source in the start-up gate.
const CRDSource = "crd"

// CRDReconciler keeps one compiled policy per audited CRD registered with the scan engine. A CRD is compiled
// again only when its uid, generation or celaudit annotations change.
type CRDReconciler struct {
	Client   client.Client
	Registry PolicyRegistry
	// Compile builds the policy of one CRD.
	Compile func(*apiextensionsv1.CustomResourceDefinition) audit.Policy
	// Audited tells whether a CRD is audited at all (for example, not celaudit's own report CRDs).
	Audited func(*apiextensionsv1.CustomResourceDefinition) bool
	// Resync is the default interval of the periodic rescan; zero disables it.
	Resync time.Duration
	Gate   *Gate
	Clock  clock.PassiveClock
	// Changed, when set, is called on every CRD event: the served resources may have changed.
	Changed func()

	mu       sync.Mutex
	compiled map[string]compiledCRD
}

type compiledCRD struct {
	uid         types.UID
	generation  int64
	annotations string
	scanned     time.Time
}

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=*,resources=*,verbs=get;list;watch

// Reconcile compiles a CRD's validation into a policy, or removes the policy of a CRD that is gone.
func (r *CRDReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
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

func (r *CRDReconciler) reconcile(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) ctrl.Result {
	if !crd.DeletionTimestamp.IsZero() || !r.Audited(crd) || !established(crd) {
		r.remove(crd.Name)
		return ctrl.Result{}
	}
	interval := resyncInterval(crd.Annotations, r.Resync)
	now := r.Clock.Now()
	want := compiledCRD{uid: crd.UID, generation: crd.Generation, annotations: celauditAnnotations(crd.Annotations), scanned: now}

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.compiled == nil {
		r.compiled = map[string]compiledCRD{}
	}
	have, ok := r.compiled[crd.Name]
	switch {
	case !ok || have.uid != want.uid || have.generation != want.generation || have.annotations != want.annotations:
		ctrl.LoggerFrom(ctx).V(1).Info("Compiling CRD validation", "generation", crd.Generation)
		r.Registry.SetPolicy(r.Compile(crd))
		r.compiled[crd.Name] = want
	case interval > 0 && now.Sub(have.scanned) >= interval:
		r.Registry.Rescan(policyKeyCRD(crd.Name), "")
		have.scanned = now
		r.compiled[crd.Name] = have
	}
	if interval <= 0 {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: interval - now.Sub(r.compiled[crd.Name].scanned)}
}

func (r *CRDReconciler) remove(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.compiled, name)
	r.Registry.RemovePolicy(policyKeyCRD(name))
}

// registerAll compiles every CRD the cache holds, then opens the gate for CRDs.
func (r *CRDReconciler) registerAll(ctx context.Context) error {
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := r.Client.List(ctx, list); err != nil {
		return fmt.Errorf("listing CustomResourceDefinitions: %w", err)
	}
	for i := range list.Items {
		r.reconcile(ctx, &list.Items[i])
	}
	r.Gate.Done(CRDSource)
	return nil
}

// SetupWithManager registers the reconciler and its start-up registration with mgr.
func (r *CRDReconciler) SetupWithManager(mgr ctrl.Manager, opts ...func(*ctrl.Builder) *ctrl.Builder) error {
	if r.Client == nil || r.Registry == nil || r.Compile == nil || r.Gate == nil {
		return fmt.Errorf("CRDReconciler needs Client, Registry, Compile and Gate")
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
		return r.registerAll(ctx)
	}))
	if err != nil {
		return fmt.Errorf("adding CRD start-up registration: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).For(&apiextensionsv1.CustomResourceDefinition{}).Named("customresourcedefinition")
	for _, o := range opts {
		b = o(b)
	}
	return b.Complete(r)
}

func policyKeyCRD(name string) string { return "crd/" + name }

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// celauditAnnotations returns the celaudit.io annotations in a stable form, so that changing them (category,
// severity, rescan) recompiles the policy while unrelated annotations do not.
func celauditAnnotations(a map[string]string) string {
	var parts []string
	for k, v := range a {
		if strings.HasPrefix(k, "celaudit.io/") {
			parts = append(parts, k+"="+v)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "\n")
}

// resyncInterval returns the policy's own interval when its annotation parses, else def.
func resyncInterval(a map[string]string, def time.Duration) time.Duration {
	if v, ok := a[AnnotationResyncInterval]; ok {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return d
		}
	}
	return def
}
