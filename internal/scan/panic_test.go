package scan_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/scan"
)

// panickyPolicy passes config maps, except those whose data has "panic": "true", on which the code it calls
// panics, as upstream code with a bug would.
type panickyPolicy struct{}

func (panickyPolicy) Key() audit.PolicyKey { return audit.PolicyKey{Source: "test", Name: "panicky"} }
func (panickyPolicy) Resources() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{configMaps}
}
func (panickyPolicy) Evaluate(_ context.Context, _ schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	if v, _, _ := unstructured.NestedString(obj.Object, "data", "panic"); v == "true" {
		upstreamBug(obj)
	}
	return []audit.Result{{Policy: "panicky", Verdict: audit.Pass, Resource: audit.RefOf(obj)}}
}

// upstreamBug indexes past the end of a slice.
func upstreamBug(obj *unstructured.Unstructured) {
	var names []string
	_ = names[len(obj.GetName())]
}

// TestScannerRecoversPanicPerObject audits config maps with a policy that panics on two of them and one that
// does not: the two get an error result of the panicking policy saying what panicked, every other evaluation
// goes on, the stack is logged once (not once per object) and names the function that panicked, and an
// object that panics later, seen by the watch, gets its error result without a second stack.
func TestScannerRecoversPanicPerObject(t *testing.T) {
	createNamespace(t, "panics")
	createConfigMap(t, "panics", "a", map[string]string{"panic": "true", "bad": "true"})
	createConfigMap(t, "panics", "b", map[string]string{"panic": "true"})
	c := createConfigMap(t, "panics", "c", map[string]string{"bad": "true"})
	var (
		mu    sync.Mutex
		lines []string
	)
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{})
	stacks := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, l := range lines {
			if strings.Contains(l, "Evaluating a policy panicked") {
				out = append(out, l)
			}
		}
		return out
	}
	scanner, store := startScannerWith(t, env.Config, scan.Options{PageSize: 2}, log, nil)
	scanner.SetPolicy(panickyPolicy{})
	scanner.SetPolicy(&keyPolicy{name: "bad", key: "bad"})
	waitSynced(t, scanner)
	expect(t, store, "panics", "bad a=fail,bad b=pass,bad c=fail,panicky a=error,panicky b=error,panicky c=pass")
	res, err := current(store, "panics")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Verdict == audit.Error && (r.Rule != audit.RuleInternal || r.Message != "internal error evaluating the policy: runtime error: index out of range [1] with length 0") {
			t.Errorf("error result %s/%s: rule %q, message %q", r.Policy, r.Resource.Name, r.Rule, r.Message)
		}
	}
	logged := stacks()
	if len(logged) != 1 {
		t.Fatalf("%d panics logged with their stack, want 1:\n%s", len(logged), strings.Join(logged, "\n"))
	}
	for _, want := range []string{"scan_test.upstreamBug", `"policy"="test/panicky"`, "runtime error: index out of range [1] with length 0"} {
		if !strings.Contains(logged[0], want) {
			t.Errorf("the logged panic lacks %q:\n%s", want, logged[0])
		}
	}

	// c panics too once changed: the watch evaluates it, and the panic is not logged with its stack again.
	c.Data["panic"] = "true"
	if err := env.Client.Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	expect(t, store, "panics", "bad a=fail,bad b=pass,bad c=fail,panicky a=error,panicky b=error,panicky c=error")
	if logged := stacks(); len(logged) != 1 {
		t.Errorf("%d panics logged with their stack after the watch's, want 1", len(logged))
	}
}
