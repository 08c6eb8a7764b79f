package scan_test

import (
	"context"
	"fmt"
	"reflect"
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

// coveringPolicy fails every object of the resources it covers, and classifies its results.
type coveringPolicy struct {
	name      string
	resources []schema.GroupVersionResource
}

var _ audit.Classified = coveringPolicy{}

func (p coveringPolicy) Key() audit.PolicyKey                     { return audit.PolicyKey{Source: "test", Name: p.name} }
func (p coveringPolicy) Resources() []schema.GroupVersionResource { return p.resources }
func (p coveringPolicy) Category() string                         { return "Credentials" }
func (p coveringPolicy) Severity() string                         { return audit.SeverityLow }
func (p coveringPolicy) Evaluate(_ context.Context, _ schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	return []audit.Result{{Policy: p.name, Verdict: audit.Fail, Resource: audit.RefOf(obj)}}
}

// A withheld resource is never listed or watched, whatever policy covers it: the policy gets one skip result
// about the resource, which follows the policy's changes, and its other resources are audited as usual.
func TestWithheldResourceNeverRead(t *testing.T) {
	const ns = "withheld"
	createNamespace(t, ns)
	createConfigMap(t, ns, "cm", nil)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}, Data: map[string][]byte{"password": []byte("hunter2-hunter2")}}
	if err := env.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	counter := &envtestutil.RequestCounter{}
	scanner, store := startScanner(t, counter.Wrap(env.Config), scan.Options{
		Withheld: map[schema.GroupVersionResource]string{secrets: "ask for it"},
		KindFor: func(gvr schema.GroupVersionResource) schema.GroupVersionKind {
			return map[string]schema.GroupVersionKind{"secrets": {Version: "v1", Kind: "Secret"}}[gvr.Resource]
		},
	})
	both := coveringPolicy{name: "both", resources: []schema.GroupVersionResource{configMaps, secrets}}
	skip := audit.Result{
		Policy: "both", PolicySource: "test", Rule: "read (v1/secrets)", Category: "Credentials", Severity: audit.SeverityLow,
		Verdict: audit.Skip, Message: "not audited (v1/secrets): ask for it",
		Properties: map[string]string{"resource": "v1/secrets"},
		Resource:   audit.ObjectRef{APIVersion: "v1", Kind: "Secret"},
	}
	expectCluster := func(want ...audit.Result) {
		t.Helper()
		envtestutil.Eventually(t, 10*time.Second, func() error {
			// Results in no namespace: here, those about a resource as a whole.
			if got, _ := store.NamespaceCounted(""); !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
				return fmt.Errorf("results about resources:\n got %+v\nwant %+v", got, want)
			}
			return nil
		})
	}

	scanner.SetPolicy(both)
	waitSynced(t, scanner)
	expect(t, store, ns, "both cm=fail")
	expectCluster(skip)

	// The policy no longer covers secrets: the skip goes; covering them again brings it back.
	scanner.SetPolicy(coveringPolicy{name: "both", resources: []schema.GroupVersionResource{configMaps}})
	waitSynced(t, scanner)
	expectCluster()
	scanner.SetPolicy(both)
	waitSynced(t, scanner)
	expectCluster(skip)
	scanner.Rescan(both.Key(), "")
	waitSynced(t, scanner)
	scanner.RemovePolicy(both.Key())
	expectCluster()
	expect(t, store, ns, "")

	for _, verb := range []string{"list", "watch", "get"} {
		if n := counter.Get(verb, "secrets"); n != 0 {
			t.Errorf("%d %s requests of secrets, which are withheld", n, verb)
		}
	}
	if n := counter.Get("list", "configmaps"); n == 0 {
		t.Error("config maps were not listed: the count is not working")
	}
}
