package envtestutil

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/controllers"
)

// TestShippedIdentity checks that the identity is celaudit's ServiceAccount with the install's access: it may
// read what it audits and may not write what it does not own.
func TestShippedIdentity(t *testing.T) {
	env := StartForTest(t)
	id := env.ShippedIdentity(t)
	c, err := client.New(id.Config, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	if got := review.Status.UserInfo.Username; got != id.Username() || got != "system:serviceaccount:celaudit-system:celaudit-controller-manager" {
		t.Fatalf("authenticated as %q, want %q", got, id.Username())
	}
	if err := c.List(ctx, &corev1.ConfigMapList{}); err != nil {
		t.Fatalf("listing ConfigMaps as %s: %v", id, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "not-celaudits"}}
	if err := c.Create(ctx, cm); !apierrors.IsForbidden(err) {
		t.Fatalf("creating a ConfigMap as %s: got %v, want Forbidden", id, err)
	}
}
