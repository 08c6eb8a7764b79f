package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/audit"
)

// namespaceReconciler rescans, within one namespace, the policies whose results depend on namespaces (a
// namespaceSelector, or the namespaceObject variable) when that namespace's labels change or it appears.
type namespaceReconciler struct {
	Client   client.Client
	Registry policyRegistry
	// Dependents returns the keys of the policies whose results depend on namespaces.
	Dependents func() []audit.PolicyKey
	// Since is when the operator started: namespaces created earlier are covered by the first audit.
	Since time.Time

	mu     sync.Mutex
	labels map[string]string
}

// Reconcile compares a namespace's labels with those last seen and rescans its dependent policies on change.
func (r *namespaceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, req.NamespacedName, ns); err != nil {
		if apierrors.IsNotFound(err) {
			r.mu.Lock()
			delete(r.labels, req.Name)
			r.mu.Unlock()
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting namespace %s: %w", req.Name, err)
	}
	sig := labelSignature(ns.Labels)
	r.mu.Lock()
	if r.labels == nil {
		r.labels = map[string]string{}
	}
	old, known := r.labels[ns.Name]
	r.labels[ns.Name] = sig
	r.mu.Unlock()
	// A namespace seen for the first time was created after start-up (or is in the initial list, whose
	// objects the first audit covers); objects evaluated before its labels reached the cache must be redone.
	if (known && old != sig) || (!known && ns.CreationTimestamp.After(r.Since)) {
		for _, key := range r.Dependents() {
			r.Registry.Rescan(key, ns.Name)
		}
	}
	return ctrl.Result{}, nil
}

func labelSignature(l map[string]string) string {
	parts := make([]string, 0, len(l))
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, "\n")
}

// SetupWithManager registers the reconciler with mgr.
func (r *namespaceReconciler) SetupWithManager(mgr ctrl.Manager, opts ...func(*ctrl.Builder) *ctrl.Builder) error {
	if r.Client == nil || r.Registry == nil || r.Dependents == nil {
		return fmt.Errorf("namespaceReconciler needs Client, Registry and Dependents")
	}
	b := ctrl.NewControllerManagedBy(mgr).For(&corev1.Namespace{}).Named("namespace")
	for _, o := range opts {
		b = o(b)
	}
	return b.Complete(r)
}
