package scan_test

import (
	"context"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/scan"
)

// The pages the operator reads, decoded item by item, equal what client-go's dynamic client decodes from the
// same API server: objects with escapes, non-ASCII text, binary data, managed fields and nested integers.
func TestClientListMatchesClientGo(t *testing.T) {
	ctx := context.Background()
	const ns = "decode-differential"
	labels := map[string]string{"app": "d"}
	objects := []crclient.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "text", Namespace: ns, Labels: labels,
				Annotations: map[string]string{"note": "line one\nline \"two\"\t<tab> & \\ é 中 😀 \u0001"}},
			Data:       map[string]string{"json": `{"a":[1,2.5,-3e2]}`, "unicode": "\u00e9\u4e2d\U0001F600", "empty": ""},
			BinaryData: map[string][]byte{"bin": {0, 1, 2, 0xff, 0xfe}},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "secret", Namespace: ns},
			Data:       map[string][]byte{"k": []byte("v\x00\xff")},
			Type:       corev1.SecretTypeOpaque,
		},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "deploy", Namespace: ns, Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](3),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						TerminationGracePeriodSeconds: ptr.To[int64](9223372036854775807),
						Containers: []corev1.Container{{
							Name: "app", Image: "registry.example/app:1",
							Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						}},
					},
				},
			},
		},
	}
	for _, o := range objects {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}

	client, err := scan.NewClient(env.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, gvr := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "configmaps"},
		{Version: "v1", Resource: "secrets"},
		{Group: "apps", Version: "v1", Resource: "deployments"},
	} {
		want, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		page, err := client.List(ctx, gvr, ns, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if page.Generic() {
			t.Errorf("%s: the page was not read in one pass", gvr.Resource)
		}
		if page.Len() != len(want.Items) || page.Len() == 0 {
			t.Fatalf("%s: %d items, client-go reads %d", gvr.Resource, page.Len(), len(want.Items))
		}
		for i := range want.Items {
			got, err := page.Item(i)
			if err != nil {
				t.Fatalf("%s item %d: %v", gvr.Resource, i, err)
			}
			if !reflect.DeepEqual(got.Object, want.Items[i].Object) {
				t.Errorf("%s item %d:\n got %#v\nwant %#v", gvr.Resource, i, got.Object, want.Items[i].Object)
			}
		}
	}
}
