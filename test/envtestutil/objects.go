package envtestutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DecodeYAML reads every document of a multi-document YAML stream.
func DecodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decoding YAML: %w", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// Apply creates each object, or replaces the spec of an existing one, and waits for CRDs to be established.
func Apply(ctx context.Context, c client.Client, objs ...*unstructured.Unstructured) error {
	for _, o := range objs {
		o = o.DeepCopy()
		err := c.Create(ctx, o)
		// A kind whose CRD was just established may not be in discovery yet: wait for it to be.
		for deadline := time.Now().Add(30 * time.Second); meta.IsNoMatchError(err) && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			err = c.Create(ctx, o)
		}
		if apierrors.IsAlreadyExists(err) {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(o.GroupVersionKind())
			if err = c.Get(ctx, client.ObjectKeyFromObject(o), cur); err == nil {
				o.SetResourceVersion(cur.GetResourceVersion())
				err = c.Update(ctx, o)
			}
		}
		if err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), client.ObjectKeyFromObject(o), err)
		}
		if o.GetKind() == "CustomResourceDefinition" {
			if err := WaitEstablished(ctx, c, o.GetName()); err != nil {
				return err
			}
		}
	}
	return nil
}

// WaitEstablished waits until the CRD is established. After a schema change the API server takes a moment
// more to serve the new schema; callers that depend on it poll.
func WaitEstablished(ctx context.Context, c client.Client, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := c.Get(ctx, client.ObjectKey{Name: name}, crd)
		if err == nil {
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %s not established in time (last error: %w)", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
