package views

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

func TestInformerNamespaces(t *testing.T) {
	cached := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"from": "store"}}}
	read := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"from": "fallback"}}}
	store := func(objs ...any) toolscache.Store {
		s := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
		for _, o := range objs {
			if err := s.Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	broken := errors.New("connection refused")
	cases := []struct {
		name        string
		store       toolscache.Store
		synced      bool
		fallbackErr error
		want        string // value of the "from" label; "" when an error is expected
		notFound    bool
		fallbacks   int
	}{
		{name: "synced: from the store", store: store(cached), synced: true, want: "store"},
		{name: "synced, not in the store: NotFound without a read", store: store(), synced: true, notFound: true},
		{name: "not synced: read through the fallback", store: store(cached), want: "fallback", fallbacks: 1},
		{name: "no store: read through the fallback", synced: true, want: "fallback", fallbacks: 1},
		{name: "a store holding something else: read through the fallback", synced: true, want: "fallback", fallbacks: 1,
			store: store(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}})},
		{name: "the fallback's NotFound is returned as it is", fallbacks: 1, notFound: true,
			fallbackErr: apierrors.NewNotFound(corev1.Resource("namespaces"), "team-a")},
		{name: "the fallback's other errors are returned", fallbacks: 1, fallbackErr: broken},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fallbacks := 0
			ns := NewInformerNamespaces(c.store, func() bool { return c.synced }, func(ctx context.Context, name string) (*corev1.Namespace, error) {
				fallbacks++
				if _, ok := ctx.Deadline(); !ok {
					t.Error("the fallback's context has no deadline")
				}
				if name != "team-a" {
					t.Errorf("fallback asked for %q", name)
				}
				return read, c.fallbackErr
			})
			got, err := ns.Get("team-a")
			if fallbacks != c.fallbacks {
				t.Errorf("fallback called %d times, want %d", fallbacks, c.fallbacks)
			}
			switch {
			case c.notFound:
				if _, ok := err.(apierrors.APIStatus); !ok || !apierrors.IsNotFound(err) { //nolint:errorlint // the namespace matcher type-asserts
					t.Errorf("Get = %v, %v; want an unwrapped NotFound", got, err)
				}
			case c.fallbackErr != nil:
				if !errors.Is(err, c.fallbackErr) {
					t.Errorf("Get error = %v, want %v", err, c.fallbackErr)
				}
			case err != nil:
				t.Errorf("Get: %v", err)
			case got.Labels["from"] != c.want:
				t.Errorf("Get returned the namespace from %q, want from %q", got.Labels["from"], c.want)
			}
		})
	}
}
