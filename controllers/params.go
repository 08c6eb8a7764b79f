package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/vap"
)

// paramReadTimeout bounds how long an evaluation waits for a param kind's cache to fill the first time.
const paramReadTimeout = 30 * time.Second

// Params serves ValidatingAdmissionPolicy param objects from the manager's cache, one informer per param
// kind in use, and tells its subscriber which kind changed so the policies reading it are audited again.
type Params struct {
	cache    cache.Cache
	onChange func(gvk schema.GroupVersionKind, objs ...metav1.Object)

	mu      sync.Mutex
	watched map[schema.GroupVersionKind]bool
}

var _ vap.ParamSource = &Params{}

// NewParams returns a param source reading c; onChange is called after an object of a watched kind is
// added, changed (with its old and new versions) or deleted.
func NewParams(c cache.Cache, onChange func(gvk schema.GroupVersionKind, objs ...metav1.Object)) *Params {
	return &Params{cache: c, onChange: onChange, watched: map[schema.GroupVersionKind]bool{}}
}

// Watch makes sure changes to param objects of gvk are reported. The initial list of a new informer is not
// reported: the policy is being audited with it anyway.
func (p *Params) Watch(ctx context.Context, gvk schema.GroupVersionKind) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watched[gvk] {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	inf, err := p.cache.GetInformer(ctx, u, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("watching param kind %s: %w", gvk, err)
	}
	changed := func(objs ...any) {
		metas := make([]metav1.Object, 0, len(objs))
		for _, o := range objs {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if m, ok := o.(metav1.Object); ok {
				metas = append(metas, m)
			}
		}
		p.onChange(gvk, metas...)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(o any, initial bool) {
			if !initial {
				changed(o)
			}
		},
		UpdateFunc: func(o, n any) { changed(o, n) },
		DeleteFunc: func(o any) { changed(o) },
	}); err != nil {
		return fmt.Errorf("watching param kind %s: %w", gvk, err)
	}
	p.watched[gvk] = true
	return nil
}

// Get implements vap.ParamSource.
func (p *Params) Get(gvk schema.GroupVersionKind, namespace, name string) (runtime.Object, error) {
	ctx, cancel := context.WithTimeout(context.Background(), paramReadTimeout)
	defer cancel()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := p.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u); err != nil {
		return nil, err
	}
	return u, nil
}

// List implements vap.ParamSource.
func (p *Params) List(gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]runtime.Object, error) {
	ctx, cancel := context.WithTimeout(context.Background(), paramReadTimeout)
	defer cancel()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	var opts []client.ListOption
	if selector != nil {
		opts = append(opts, client.MatchingLabelsSelector{Selector: selector})
	}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	if err := p.cache.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	out := make([]runtime.Object, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}
