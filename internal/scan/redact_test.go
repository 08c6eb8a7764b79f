package scan_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/test/envtestutil"
)

var secrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// quotingPolicy copies data.password, as stored and decoded, into the message and a property of its result:
// a policy that fails to withhold what it reads.
type quotingPolicy struct{}

func (quotingPolicy) Key() audit.PolicyKey { return audit.PolicyKey{Source: "test", Name: "quoting"} }
func (quotingPolicy) Resources() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{secrets, configMaps}
}
func (quotingPolicy) Evaluate(_ context.Context, _ schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	stored, _, _ := unstructured.NestedString(obj.Object, "data", "password")
	decoded, _ := base64.StdEncoding.DecodeString(stored)
	return []audit.Result{{
		Policy:     "quoting",
		Verdict:    audit.Fail,
		Message:    fmt.Sprintf("stored %s, decoded %s", stored, decoded),
		Properties: map[string]string{"quoted": string(decoded)},
		Resource:   audit.RefOf(obj),
	}}
}

// The scanner redacts every result of a Secret of the Secret's values, whatever the policy did; other kinds
// are left as the policy made them.
func TestScannerRedactsSecrets(t *testing.T) {
	const (
		ns       = "redact"
		password = "S3cr3t-P4ssw0rd-1234"
		encoded  = "UzNjcjN0LVA0c3N3MHJkLTEyMzQ=" // base64 of password
	)
	createNamespace(t, ns)
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}, Data: map[string][]byte{"password": []byte(password)}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	// The same content, in a kind whose data is not secret.
	createConfigMap(t, ns, "c", map[string]string{"password": encoded})

	scanner, store := startScanner(t, env.Config, scan.Options{})
	scanner.SetPolicy(quotingPolicy{})
	waitSynced(t, scanner)
	want := map[string]audit.Result{
		"Secret": {Message: "stored [redacted], decoded [redacted]", Properties: map[string]string{"quoted": "[redacted]"}},
		"ConfigMap": {
			Message:    "stored " + encoded + ", decoded " + password,
			Properties: map[string]string{"quoted": password},
		},
	}
	envtestutil.Eventually(t, 20*time.Second, func() error {
		got, err := current(store, ns)
		if err != nil {
			return err
		}
		if len(got) != 2 {
			return fmt.Errorf("got %d results, want 2: %+v", len(got), got)
		}
		for _, r := range got {
			w := want[r.Resource.Kind]
			if r.Message != w.Message || r.Properties["quoted"] != w.Properties["quoted"] {
				return fmt.Errorf("result of the %s: message %q, quoted %q; want %q, %q",
					r.Resource.Kind, r.Message, r.Properties["quoted"], w.Message, w.Properties["quoted"])
			}
		}
		return nil
	})
}
