package envtestutil

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StoreUnvalidated creates obj by writing it straight into etcd, as JSON, which the API server reads back like
// what it stores itself: the API server's validation is skipped. It is how a test makes an object that the
// API server accepted under other rules and would reject today, such as a policy written under another
// Kubernetes version, with an expression this one cannot compile. obj needs its apiVersion, kind and name;
// its uid, creationTimestamp and generation are set. key is the object's etcd key below /registry/, e.g.
// "validatingadmissionpolicies/<name>" or "apiextensions.k8s.io/customresourcedefinitions/<name>" for a
// cluster-scoped object. The object must not exist yet.
func (e *Env) StoreUnvalidated(ctx context.Context, key string, obj client.Object) error {
	if obj.GetObjectKind().GroupVersionKind().Empty() || obj.GetName() == "" {
		return fmt.Errorf("storing %s: the object needs its apiVersion, kind and name", key)
	}
	obj.SetUID(uuid.NewUUID())
	obj.SetCreationTimestamp(metav1.NewTime(time.Now()))
	obj.SetGeneration(1)
	data, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", key, err)
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{e.ControlPlane.Etcd.URL.String()},
		DialTimeout: 10 * time.Second,
		Logger:      nil,
	})
	if err != nil {
		return fmt.Errorf("connecting to etcd: %w", err)
	}
	defer func() { _ = c.Close() }()
	path := "/registry/" + key
	// Create only: never overwrite what the API server stored.
	resp, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(path), "=", 0)).
		Then(clientv3.OpPut(path, string(data))).
		Commit()
	if err != nil {
		return fmt.Errorf("writing %s to etcd: %w", path, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("writing %s to etcd: it exists", path)
	}
	return nil
}
