package vap

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
)

var failTooMany = row{"validations[0]", audit.Fail, "too many", denyProps("rule", replicasRule, "reason", "Invalid")}

func tooMany(opts ...policyOption) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return newPolicy("p", append([]policyOption{withValidation(replicasRule, message("too many"))}, opts...)...)
}

func TestEvaluateSelectors(t *testing.T) {
	prodOnly := withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
		m.NamespaceSelector = selector(map[string]string{"env": "prod"})
	})
	runCases(t, []evalCase{{
		name:   "namespaceSelector matches",
		policy: tooMany(prodOnly),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{failTooMany},
	}, {
		name:   "namespaceSelector does not match",
		policy: tooMany(prodOnly),
		obj:    newDeployment("dev", "d", 5),
		want:   nil,
	}, {
		name:   "namespaceSelector on a missing namespace",
		policy: tooMany(prodOnly),
		obj:    newDeployment("gone", "d", 5),
		want:   []row{{"configuration", audit.Error, `failed to configure policy: namespaces "gone" not found`, props("failurePolicy", "Fail")}},
	}, {
		name: "namespaceSelector expressions",
		policy: tooMany(withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
			m.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "env", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"dev"}},
			}}
		})),
		obj:  newDeployment("default", "d", 5),
		want: []row{failTooMany},
	}, {
		name:   "cluster-scoped objects always match namespaceSelectors",
		policy: tooMany(withRules(rule("", "v1", "nodes")), prodOnly),
		gvr:    nodesGVR,
		obj:    newObject("v1", "Node", "", "n", withField(int64(5), "spec", "replicas")),
		want:   []row{failTooMany},
	}, {
		name:   "binding namespaceSelector",
		policy: tooMany(),
		bindings: bindings{newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
			m.NamespaceSelector = selector(map[string]string{"env": "dev"})
		}))},
		obj:  newDeployment("prod", "d", 5),
		want: nil,
	}, {
		name: "objectSelector matches",
		policy: tooMany(withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
			m.ObjectSelector = selector(map[string]string{"audit": "yes"})
		})),
		obj:  newDeployment("prod", "d", 5, withLabels(map[string]string{"audit": "yes"})),
		want: []row{failTooMany},
	}, {
		name: "objectSelector does not match",
		policy: tooMany(withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
			m.ObjectSelector = selector(map[string]string{"audit": "yes"})
		})),
		obj:  newDeployment("prod", "d", 5),
		want: nil,
	}, {
		name:   "binding objectSelector",
		policy: tooMany(),
		bindings: bindings{newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
			m.ObjectSelector = selector(map[string]string{"audit": "yes"})
		}))},
		obj:  newDeployment("prod", "d", 5, withLabels(map[string]string{"audit": "no"})),
		want: nil,
	}, {
		name: "excludeResourceRules by name",
		policy: tooMany(withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
			excluded := rule("apps", "v1", "deployments")
			excluded.ResourceNames = []string{"legacy"}
			m.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{excluded}
		})),
		obj:  newDeployment("prod", "legacy", 5),
		want: nil,
	}, {
		name: "excludeResourceRules for other names",
		policy: tooMany(withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
			excluded := rule("apps", "v1", "deployments")
			excluded.ResourceNames = []string{"legacy"}
			m.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{excluded}
		})),
		obj:  newDeployment("prod", "d", 5),
		want: []row{failTooMany},
	}, {
		name:   "binding excludeResourceRules",
		policy: tooMany(),
		bindings: bindings{newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
			m.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{rule("apps", "*", "deployments")}
		}))},
		obj:  newDeployment("prod", "d", 5),
		want: nil,
	}, {
		name:   "resourceNames include",
		policy: tooMany(withRules(named(rule("apps", "v1", "deployments"), "d", "e"))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{failTooMany},
	}, {
		name:   "resourceNames leave other names out",
		policy: tooMany(withRules(named(rule("apps", "v1", "deployments"), "e"))),
		obj:    newDeployment("prod", "d", 5),
		want:   nil,
	}, {
		name:   "binding resourceRules narrow the policy",
		policy: tooMany(),
		bindings: bindings{newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
			m.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{named(rule("apps", "v1", "deployments"), "other")}
		}))},
		obj:  newDeployment("prod", "d", 5),
		want: nil,
	}, {
		name:   "Namespaced scope matches namespaced objects",
		policy: tooMany(withRules(scoped(rule("*", "*", "*"), admissionregistrationv1.NamespacedScope))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{failTooMany},
	}, {
		name:   "Namespaced scope leaves cluster-scoped objects out",
		policy: tooMany(withRules(scoped(rule("*", "*", "*"), admissionregistrationv1.NamespacedScope))),
		gvr:    nodesGVR,
		obj:    newObject("v1", "Node", "", "n", withField(int64(5), "spec", "replicas")),
		want:   nil,
	}, {
		name:   "Cluster scope matches cluster-scoped objects",
		policy: tooMany(withRules(scoped(rule("", "v1", "*"), admissionregistrationv1.ClusterScope))),
		gvr:    nodesGVR,
		obj:    newObject("v1", "Node", "", "n", withField(int64(5), "spec", "replicas")),
		want:   []row{failTooMany},
	}, {
		name:   "Cluster scope leaves namespaced objects out",
		policy: tooMany(withRules(scoped(rule("*", "*", "*"), admissionregistrationv1.ClusterScope))),
		obj:    newDeployment("prod", "d", 5),
		want:   nil,
	}})
}

func named(r admissionregistrationv1.NamedRuleWithOperations, names ...string) admissionregistrationv1.NamedRuleWithOperations {
	r.ResourceNames = names
	return r
}

func scoped(r admissionregistrationv1.NamedRuleWithOperations, s admissionregistrationv1.ScopeType) admissionregistrationv1.NamedRuleWithOperations {
	r.Scope = &s
	return r
}

func TestEvaluateNamespaces(t *testing.T) {
	nsPolicy := func(opts ...policyOption) *admissionregistrationv1.ValidatingAdmissionPolicy {
		return newPolicy("p", append([]policyOption{withRules(rule("", "v1", "namespaces"))}, opts...)...)
	}
	runCases(t, []evalCase{{
		name: "a Namespace is selected by its own labels",
		policy: nsPolicy(withValidation("object.metadata.name == 'x'", message("bad")),
			withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
				m.NamespaceSelector = selector(map[string]string{"env": "new"})
			})),
		gvr:  namespacesGVR,
		obj:  newObject("v1", "Namespace", "", "fresh", withLabels(map[string]string{"env": "new"})),
		want: []row{{"validations[0]", audit.Fail, "bad", denyProps("rule", "object.metadata.name == 'x'", "reason", "Invalid")}},
	}, {
		name:   "a Namespace's request has its name as namespace and no namespaceObject",
		policy: nsPolicy(withValidation("request.namespace == 'fresh' && namespaceObject == null")),
		gvr:    namespacesGVR,
		obj:    newObject("v1", "Namespace", "", "fresh"),
		want:   []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", denyProps()}},
	}, {
		name:   "namespaceObject of a missing namespace",
		policy: tooMany(withValidation("namespaceObject != null")),
		obj:    newDeployment("gone", "d", 1),
		want:   []row{{"namespaceObject", audit.Error, `namespaces "gone" not found`, denyProps("failurePolicy", "Fail")}},
	}, {
		name: "no namespace source",
		policy: tooMany(withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
			m.NamespaceSelector = selector(map[string]string{"env": "prod"})
		})),
		deps: func(d *Deps) { d.Namespaces = nil },
		obj:  newDeployment("prod", "d", 5),
		want: []row{{"configuration", audit.Error, "failed to configure policy: Internal error occurred: no namespace source configured", props("failurePolicy", "Fail")}},
	}})
}

// widgetsPolicy matches example.com widgets of version with matchPolicy mp and reports the version of the
// request and the version evaluated.
func widgetsPolicy(version string, mp admissionregistrationv1.MatchPolicyType) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return newPolicy("p", withRules(rule("example.com", version, "widgets")),
		withMatchConstraints(func(m *admissionregistrationv1.MatchResources) { m.MatchPolicy = &mp }),
		withValidation("false", messageExpression("request.requestResource.version + ' as ' + request.resource.version + ' ' + request.kind.version + ' ' + object.apiVersion")))
}

func exactBinding(version string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	exact := admissionregistrationv1.Exact
	return newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
		m.MatchPolicy = &exact
		m.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{rule("example.com", version, "widgets")}
	}))
}

func TestEvaluateMatchPolicy(t *testing.T) {
	widgetV1 := newObject("example.com/v1", "Widget", "prod", "w")
	widgetV1beta1 := newObject("example.com/v1beta1", "Widget", "prod", "w")
	versions := func(s string) []row {
		return []row{{"validations[0]", audit.Fail, s, denyProps("rule", "false", "reason", "Invalid")}}
	}
	cases := []struct {
		evalCase
		resources []schema.GroupVersionResource
	}{{
		evalCase: evalCase{
			name:   "Exact is read in the version it names",
			policy: widgetsPolicy("v1beta1", admissionregistrationv1.Exact),
			gvr:    widgetsV1beta1GVR, obj: widgetV1beta1,
			want: versions("v1beta1 as v1beta1 v1beta1 example.com/v1beta1"),
		},
		resources: []schema.GroupVersionResource{widgetsV1beta1GVR},
	}, {
		evalCase: evalCase{
			name:   "Exact ignores other versions",
			policy: widgetsPolicy("v1beta1", admissionregistrationv1.Exact),
			gvr:    widgetsV1GVR, obj: widgetV1,
			want: nil,
		},
		resources: []schema.GroupVersionResource{widgetsV1beta1GVR},
	}, {
		evalCase: evalCase{
			name:   "Equivalent is read in the version it names, not the preferred one",
			policy: widgetsPolicy("v1beta1", admissionregistrationv1.Equivalent),
			gvr:    widgetsV1beta1GVR, obj: widgetV1beta1,
			want: versions("v1beta1 as v1beta1 v1beta1 example.com/v1beta1"),
		},
		resources: []schema.GroupVersionResource{widgetsV1beta1GVR},
	}, {
		evalCase: evalCase{
			name:   "Equivalent does not evaluate other reads twice",
			policy: widgetsPolicy("v1beta1", admissionregistrationv1.Equivalent),
			gvr:    widgetsV1GVR, obj: widgetV1,
			want: nil,
		},
		resources: []schema.GroupVersionResource{widgetsV1beta1GVR},
	}, {
		evalCase: evalCase{
			name:   "every version is read in the preferred one",
			policy: widgetsPolicy("*", admissionregistrationv1.Equivalent),
			gvr:    widgetsV1GVR, obj: widgetV1,
			want: versions("v1 as v1 v1 example.com/v1"),
		},
		resources: []schema.GroupVersionResource{widgetsV1GVR},
	}, {
		evalCase: evalCase{
			name:     "a request the binding matches exactly, converted to the version the policy names",
			policy:   widgetsPolicy("v1beta1", admissionregistrationv1.Equivalent),
			bindings: bindings{exactBinding("v1")},
			gvr:      widgetsV1beta1GVR, obj: widgetV1beta1,
			want: versions("v1 as v1beta1 v1beta1 example.com/v1beta1"),
		},
		resources: []schema.GroupVersionResource{widgetsV1beta1GVR},
	}, {
		evalCase: evalCase{
			name:     "a binding matching exactly a version other than the preferred one",
			policy:   widgetsPolicy("*", admissionregistrationv1.Equivalent),
			bindings: bindings{exactBinding("v1beta1")},
			gvr:      widgetsV1beta1GVR, obj: widgetV1beta1,
			want: versions("v1beta1 as v1beta1 v1beta1 example.com/v1beta1"),
		},
		resources: []schema.GroupVersionResource{widgetsV1beta1GVR},
	}, {
		evalCase: evalCase{
			name:     "Exact policy and binding naming different versions never match",
			policy:   widgetsPolicy("v1beta1", admissionregistrationv1.Exact),
			bindings: bindings{exactBinding("v1")},
			gvr:      widgetsV1beta1GVR, obj: widgetV1beta1,
			want: nil,
		},
		resources: nil,
	}, {
		evalCase: evalCase{
			name:   "cohabiting groups are read once",
			policy: newPolicy("p", withRules(rule("*", "*", "events")), withValidation("false")),
			gvr:    coreEventsGVR, obj: newObject("v1", "Event", "prod", "e"),
			want: []row{{"validations[0]", audit.Fail, "failed expression: false", denyProps("rule", "false", "reason", "Invalid")}},
		},
		resources: []schema.GroupVersionResource{coreEventsGVR},
	}, {
		evalCase: evalCase{
			name:   "cohabiting groups, policy naming the other group",
			policy: newPolicy("p", withRules(rule("events.k8s.io", "v1", "events")), withValidation("false")),
			gvr:    eventsGVR, obj: newObject("events.k8s.io/v1", "Event", "prod", "e"),
			want: []row{{"validations[0]", audit.Fail, "failed expression: false", denyProps("rule", "false", "reason", "Invalid")}},
		},
		resources: []schema.GroupVersionResource{eventsGVR},
	}, {
		evalCase: evalCase{
			// The read version is planned per resource; an object whose name sends it through another version
			// would need a conversion, which the audit does not do: it says where to read the object instead.
			name: "an object matched only through another version",
			policy: newPolicy("p", withRules(named(rule("example.com", "v1", "widgets"), "named"), rule("example.com", "v1beta1", "widgets")),
				withValidation("false")),
			gvr: widgetsV1GVR, obj: widgetV1,
			want: []row{{"configuration", audit.Error,
				"failed to configure binding: failed to convert object version: the object must be read as example.com/v1beta1, Kind=Widget to be evaluated",
				denyProps("failurePolicy", "Fail")}},
		},
		resources: []schema.GroupVersionResource{widgetsV1GVR},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t)
			bs := c.bindings
			if bs == nil {
				bs = bindings{newBinding("b", "p")}
			}
			if got := CompilePolicy(c.policy, Options{}).Bind(bs, testDeps(t)).Resources(); !slices.Equal(got, c.resources) {
				t.Errorf("Resources() = %v, want %v", got, c.resources)
			}
		})
	}
}
