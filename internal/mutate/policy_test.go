package mutate

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
)

func TestPoliciesResources(t *testing.T) {
	cases := []struct {
		name string
		docs []string
		want map[string][]schema.GroupVersionResource
	}{{
		name: "UPDATE binding on configmaps",
		docs: []string{policy("p", "configmaps", "UPDATE", "", jsonPatch(`[]`)), binding("p")},
		want: map[string][]schema.GroupVersionResource{"p": {configMapsGVR}},
	}, {
		name: "CREATE only still reads the resource",
		docs: []string{policy("p", "apps/deployments", "CREATE", "", jsonPatch(`[]`)), binding("p")},
		want: map[string][]schema.GroupVersionResource{"p": {deploymentsGVR}},
	}, {
		name: "DELETE only reads nothing",
		docs: []string{policy("p", "configmaps", "DELETE", "", jsonPatch(`[]`)), binding("p")},
		want: map[string][]schema.GroupVersionResource{"p": nil},
	}, {
		name: "wildcard leaves out the admission policy kinds and reports",
		docs: []string{policy("p", `"*"`, "UPDATE", "", jsonPatch(`[]`)), binding("p")},
		want: map[string][]schema.GroupVersionResource{"p": {configMapsGVR, secretsGVR,
			{Version: "v1", Resource: "namespaces"}}},
	}, {
		name: "a policy without binding is not applied",
		docs: []string{policy("p", "configmaps", "UPDATE", "", jsonPatch(`[]`)), policy("q", "configmaps", "UPDATE", "", jsonPatch(`[]`)), binding("q")},
		want: map[string][]schema.GroupVersionResource{"q": {configMapsGVR}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := map[string][]schema.GroupVersionResource{}
			for _, p := range newSet(t, c.docs...).Policies(Defaults{}) {
				if p.Key().Source != audit.SourceMAP {
					t.Errorf("%s: source %q", p.Key().Name, p.Key().Source)
				}
				got[p.Key().Name] = p.Resources()
			}
			if len(got) != len(c.want) {
				t.Fatalf("policies %v, want %v", got, c.want)
			}
			for name, want := range c.want {
				if g, ok := got[name]; !ok || !slices.Equal(g, want) {
					t.Errorf("%s: resources %v, want %v", name, g, want)
				}
			}
		})
	}
}

func TestPolicyResults(t *testing.T) {
	set := newSet(t,
		policy("a-label", "configmaps", "UPDATE", "", applyConfig(teamLabel)),
		binding("a-label"),
		policy("b-noop", "configmaps", "UPDATE", "", applyConfig(`Object{data: {"k": "v"}}`)),
		binding("b-noop"),
		policy("c-create", "configmaps", "CREATE", "", applyConfig(teamLabel)),
		binding("c-create"),
	)
	policies := set.Policies(Defaults{Category: "platform", Severity: "high"})
	obj := object(t, bareConfigMap)

	// Evaluated together, as front ends do, the chain runs once.
	cache := &audit.ObjectCache{}
	ctx := audit.WithObjectCache(context.Background(), cache)
	got := map[string]audit.Result{}
	for _, p := range policies {
		res := p.Evaluate(ctx, configMapsGVR, obj)
		if len(res) > 1 {
			t.Fatalf("%s: %d results", p.Key().Name, len(res))
		}
		if len(res) == 1 {
			got[p.Key().Name] = res[0]
		}
	}
	cache.Get(sharedKey{set: set, gvr: configMapsGVR}, func() any {
		t.Error("the chain's outcome is not in the object's cache")
		return Outcome{}
	})
	label, ok := got["a-label"]
	if !ok {
		t.Fatalf("no result of a-label: %v", got)
	}
	wantProps := map[string]string{
		audit.PropOperation:     "UPDATE",
		audit.PropFailurePolicy: "Fail",
		PropFields:              "metadata.labels.team",
		PropPatch:               `[{"op":"add","path":"/metadata/labels","value":{"team":"blue"}}]`,
	}
	if label.Verdict != audit.Warn || label.Rule != RuleMutations || label.Category != "platform" || label.Severity != "high" ||
		label.PolicySource != audit.SourceMAP || label.Resource.Name != "a" {
		t.Errorf("a-label result %+v", label)
	}
	for k, v := range wantProps {
		if label.Properties[k] != v {
			t.Errorf("a-label property %s = %q, want %q", k, label.Properties[k], v)
		}
	}
	if noop := got["b-noop"]; noop.Verdict != audit.Pass || noop.Properties[PropPatch] != "" {
		t.Errorf("b-noop result %+v, want a pass without patch", noop)
	}
	// On an UPDATE a CREATE-only binding does not apply: no result, as no change.
	if r, ok := got["c-create"]; ok {
		t.Errorf("c-create has a result on an UPDATE: %+v", r)
	}
}

// TestPolicyOptions checks the options of front ends: the whole patch (whatif -o yaml) and judging objects as
// new ones (check).
func TestPolicyOptions(t *testing.T) {
	long := strings.Repeat("x", MaxPatchBytes)
	set := newSet(t,
		policy("a-update", "configmaps", "UPDATE", "", applyConfig(`Object{metadata: Object.metadata{labels: {"team": "`+long+`"}}}`)),
		binding("a-update"),
		policy("b-create", "configmaps", "CREATE", "", applyConfig(teamLabel)),
		binding("b-create"),
	)
	wholePatch := `[{"op":"add","path":"/metadata/labels","value":{"team":"` + long + `"}}]`
	cases := []struct {
		name     string
		defaults Defaults
		// want holds the properties expected of each policy's result; a policy missing gives none.
		want          map[string]map[string]string
		wantResources map[string]int
	}{{
		name:          "stored objects: the UPDATE, the patch cut",
		defaults:      Defaults{},
		want:          map[string]map[string]string{"a-update": {audit.PropOperation: "UPDATE", PropPatch: "[]", PropPatchTruncated: "true"}},
		wantResources: map[string]int{"a-update": 1, "b-create": 1},
	}, {
		name:          "the whole patch",
		defaults:      Defaults{FullPatch: true},
		want:          map[string]map[string]string{"a-update": {audit.PropOperation: "UPDATE", PropPatch: wholePatch, PropPatchTruncated: ""}},
		wantResources: map[string]int{"a-update": 1, "b-create": 1},
	}, {
		name:     "new objects: the CREATE",
		defaults: Defaults{Create: true},
		want: map[string]map[string]string{"b-create": {audit.PropOperation: "CREATE",
			PropPatch: `[{"op":"add","path":"/metadata/labels","value":{"team":"blue"}}]`}},
		wantResources: map[string]int{"a-update": 0, "b-create": 1},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := audit.WithObjectCache(context.Background(), &audit.ObjectCache{})
			obj := object(t, bareConfigMap)
			for _, p := range set.Policies(c.defaults) {
				if got, want := len(p.Resources()), c.wantResources[p.Key().Name]; got != want {
					t.Errorf("%s: %d resources, want %d", p.Key().Name, got, want)
				}
				res := p.Evaluate(ctx, configMapsGVR, obj)
				want, ok := c.want[p.Key().Name]
				if !ok {
					if len(res) != 0 {
						t.Errorf("%s: results %+v, want none", p.Key().Name, res)
					}
					continue
				}
				if len(res) != 1 || res[0].Verdict != audit.Warn {
					t.Fatalf("%s: results %+v, want one warn", p.Key().Name, res)
				}
				for k, v := range want {
					if res[0].Properties[k] != v {
						t.Errorf("%s: property %s = %.80q, want %.80q", p.Key().Name, k, res[0].Properties[k], v)
					}
				}
			}
		})
	}
}
