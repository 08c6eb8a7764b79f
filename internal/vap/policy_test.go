package vap

import (
	"reflect"
	"slices"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/celaudit/celaudit/internal/audit"
)

func TestResources(t *testing.T) {
	const (
		create  = admissionregistrationv1.Create
		del     = admissionregistrationv1.Delete
		connect = admissionregistrationv1.Connect
	)
	limitsGVR := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "limits"}
	clusterLimitsGVR := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "clusterlimits"}
	policyReportsGVR := schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}
	clusterPolicyReportsGVR := schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "clusterpolicyreports"}
	cases := []struct {
		name     string
		policy   *admissionregistrationv1.ValidatingAdmissionPolicy
		bindings bindings
		deps     func(*Deps)
		want     []schema.GroupVersionResource
	}{{
		name:   "one resource",
		policy: newPolicy("p"),
		want:   []schema.GroupVersionResource{deploymentsGVR},
	}, {
		name:   "wildcards: every resource that can be listed and watched once, in discovery order, without admission configuration or celaudit's reports",
		policy: newPolicy("p", withRules(rule("*", "*", "*"))),
		want: []schema.GroupVersionResource{podsGVR, namespacesGVR, configMapsGVR, secretsGVR, coreEventsGVR, nodesGVR, deploymentsGVR,
			widgetsV1GVR, limitsGVR, clusterLimitsGVR},
	}, {
		name:   "all resources and subresources",
		policy: newPolicy("p", withRules(rule("", "v1", "*/*"))),
		want:   []schema.GroupVersionResource{podsGVR, namespacesGVR, configMapsGVR, secretsGVR, coreEventsGVR, nodesGVR},
	}, {
		name:   "all subresources of a resource include the resource",
		policy: newPolicy("p", withRules(rule("", "v1", "pods/*"))),
		want:   []schema.GroupVersionResource{podsGVR},
	}, {
		name:   "subresources only",
		policy: newPolicy("p", withRules(rule("", "v1", "pods/status"), rule("apps", "v1", "deployments/scale"))),
		want:   nil,
	}, {
		name:   "scope",
		policy: newPolicy("p", withRules(scoped(rule("", "v1", "*"), admissionregistrationv1.ClusterScope))),
		want:   []schema.GroupVersionResource{namespacesGVR, nodesGVR},
	}, {
		name: "excluded resources",
		policy: newPolicy("p", withRules(rule("", "v1", "*")), withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
			m.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{rule("", "*", "pods"), named(rule("", "*", "nodes"), "n")}
		})),
		want: []schema.GroupVersionResource{namespacesGVR, configMapsGVR, secretsGVR, coreEventsGVR, nodesGVR},
	}, {
		name:   "admission configuration is never audited",
		policy: newPolicy("p", withRules(rule("admissionregistration.k8s.io", "*", "*"))),
		want:   nil,
	}, {
		name:   "resources that cannot be listed",
		policy: newPolicy("p", withRules(rule("", "v1", "bindings"))),
		want:   nil,
	}, {
		name:   "resources that cannot be watched",
		policy: newPolicy("p", withRules(rule("", "v1", "componentstatuses"))),
		want:   nil,
	}, {
		name:   "celaudit's own reports when the policy names them",
		policy: newPolicy("p", withRules(rule("wgpolicyk8s.io", "*", "policyreports"))),
		want:   []schema.GroupVersionResource{policyReportsGVR},
	}, {
		name:   "celaudit's own reports when a binding names them",
		policy: newPolicy("p", withRules(rule("*", "*", "*"))),
		bindings: bindings{newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
			m.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{rule("wgpolicyk8s.io", "v1alpha2", "clusterpolicyreports")}
		}))},
		want: []schema.GroupVersionResource{clusterPolicyReportsGVR},
	}, {
		name:   "celaudit's own reports are not matched by a wildcard group",
		policy: newPolicy("p", withRules(rule("*", "*", "policyreports"))),
		want:   nil,
	}, {
		name:   "DELETE-only policies list resources for their skips",
		policy: newPolicy("p", withRules(rule("apps", "v1", "deployments", del))),
		want:   []schema.GroupVersionResource{deploymentsGVR},
	}, {
		name:   "CONNECT-only policies list nothing",
		policy: newPolicy("p", withRules(rule("", "v1", "pods/exec", connect), rule("", "v1", "pods", connect))),
		want:   nil,
	}, {
		name:   "bindings narrow the resources",
		policy: newPolicy("p", withRules(rule("", "v1", "*", create))),
		bindings: bindings{newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
			m.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{rule("", "v1", "nodes")}
		}))},
		want: []schema.GroupVersionResource{nodesGVR},
	}, {
		name:   "bindings add up",
		policy: newPolicy("p", withRules(rule("", "v1", "*", create))),
		bindings: bindings{
			newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
				m.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{rule("", "v1", "nodes")}
			})),
			newBinding("c", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
				m.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{rule("", "v1", "pods")}
			})),
		},
		want: []schema.GroupVersionResource{podsGVR, nodesGVR},
	}, {
		name:   "a binding matching nothing the policy matches",
		policy: newPolicy("p"),
		bindings: bindings{newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
			m.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{rule("", "v1", "pods")}
		}))},
		want: nil,
	}, {
		name:   "unknown resources",
		policy: newPolicy("p", withRules(rule("example.org", "v1", "gadgets"))),
		want:   nil,
	}, {
		name:   "no resolver",
		policy: newPolicy("p"),
		deps:   func(d *Deps) { d.Resolver = nil },
		want:   nil,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			deps := testDeps(t)
			if c.deps != nil {
				c.deps(&deps)
			}
			bs := c.bindings
			if bs == nil {
				bs = bindings{newBinding("b", "p")}
			}
			if got := CompilePolicy(c.policy, Options{}).Bind(bs, deps).Resources(); !slices.Equal(got, c.want) {
				t.Errorf("Resources() = %v, want %v", got, c.want)
			}
		})
	}
}

func TestPolicyDescription(t *testing.T) {
	prodOnly := func(m *admissionregistrationv1.MatchResources) {
		m.NamespaceSelector = selector(map[string]string{"env": "prod"})
	}
	cases := []struct {
		name           string
		policy         *admissionregistrationv1.ValidatingAdmissionPolicy
		bindings       bindings
		paramKinds     []schema.GroupVersionKind
		dependsOnSpace bool
	}{{
		name:   "plain",
		policy: newPolicy("p", withValidation(replicasRule)),
	}, {
		name:       "paramKind",
		policy:     newPolicy("p", withParamKind(limitsGVK)),
		paramKinds: []schema.GroupVersionKind{limitsGVK},
	}, {
		name:           "policy namespaceSelector",
		policy:         newPolicy("p", withMatchConstraints(prodOnly)),
		dependsOnSpace: true,
	}, {
		name:           "binding namespaceSelector",
		policy:         newPolicy("p"),
		bindings:       bindings{newBinding("b", "p", withMatchResources(prodOnly))},
		dependsOnSpace: true,
	}, {
		name:           "namespaceObject in a variable",
		policy:         newPolicy("p", withVariable("env", "namespaceObject.metadata.labels.env")),
		dependsOnSpace: true,
	}, {
		name:           "namespaceObject in a messageExpression",
		policy:         newPolicy("p", withValidation("true", messageExpression("namespaceObject.metadata.name"))),
		dependsOnSpace: true,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := CompilePolicy(c.policy, Options{}).Bind(c.bindings, testDeps(t))
			if got := p.Key(); got != (audit.PolicyKey{Source: audit.SourceVAP, Name: "p"}) {
				t.Errorf("Key() = %q", got)
			}
			if got := p.ParamKinds(); !slices.Equal(got, c.paramKinds) {
				t.Errorf("ParamKinds() = %v, want %v", got, c.paramKinds)
			}
			if got := p.DependsOnNamespaces(); got != c.dependsOnSpace {
				t.Errorf("DependsOnNamespaces() = %v, want %v", got, c.dependsOnSpace)
			}
		})
	}
}

func TestCategoryAndSeverity(t *testing.T) {
	cases := []struct {
		name                       string
		annotations                map[string]string
		opts                       Options
		wantCategory, wantSeverity string
	}{
		{name: "defaults", wantCategory: "ValidatingAdmissionPolicy", wantSeverity: "medium"},
		{name: "option defaults", opts: Options{Category: "Cluster", Severity: "low"}, wantCategory: "Cluster", wantSeverity: "low"},
		{name: "annotations", annotations: map[string]string{audit.AnnotationCategory: "Security", audit.AnnotationSeverity: "high"},
			opts: Options{Category: "Cluster", Severity: "low"}, wantCategory: "Security", wantSeverity: "high"},
		{name: "severity is case-insensitive", annotations: map[string]string{audit.AnnotationSeverity: " Critical "}, wantCategory: "ValidatingAdmissionPolicy", wantSeverity: "critical"},
		{name: "invalid severity falls back", annotations: map[string]string{audit.AnnotationSeverity: "urgent"}, opts: Options{Severity: "info"},
			wantCategory: "ValidatingAdmissionPolicy", wantSeverity: "info"},
		{name: "invalid default severity falls back", opts: Options{Severity: "urgent"}, wantCategory: "ValidatingAdmissionPolicy", wantSeverity: "medium"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			policy := newPolicy("p", withValidation(replicasRule))
			policy.Annotations = c.annotations
			got := CompilePolicy(policy, c.opts).Bind(nil, testDeps(t)).Evaluate(defaultTestContext, deploymentsGVR, newDeployment("prod", "d", 5))
			if len(got) != 1 || got[0].Category != c.wantCategory || got[0].Severity != c.wantSeverity {
				t.Errorf("got %+v, want one result of category %q, severity %q", got, c.wantCategory, c.wantSeverity)
			}
		})
	}
}

func TestCacheKey(t *testing.T) {
	base := newPolicy("p")
	newer := base.DeepCopy()
	newer.Generation = 2
	recategorized := base.DeepCopy()
	recategorized.Annotations = map[string]string{audit.AnnotationCategory: "Security"}
	relabeled := base.DeepCopy()
	relabeled.Labels = map[string]string{"x": "y"}
	if CacheKey(base) == CacheKey(newer) || CacheKey(base) == CacheKey(recategorized) {
		t.Errorf("CacheKey does not change with generation or category: %q %q %q", CacheKey(base), CacheKey(newer), CacheKey(recategorized))
	}
	if CacheKey(base) != CacheKey(relabeled) {
		t.Errorf("CacheKey changes with labels: %q %q", CacheKey(base), CacheKey(relabeled))
	}
}

// TestBindReusesCompilation binds one compiled policy to one set of bindings after another, as the
// controllers do when bindings change: each set gives its own results (a Deny binding fails, a Warn binding
// warns, no binding audits), whatever was bound before, and no Bind compiles the policy again.
func TestBindReusesCompilation(t *testing.T) {
	compiled := CompilePolicy(newPolicy("p", withValidation(replicasRule, message("too many"))), Options{})
	failed := func(verdict audit.Verdict, kv ...string) []row {
		return []row{{"validations[0]", verdict, "too many",
			props(append(kv, audit.PropOperation, "CREATE", audit.PropRule, replicasRule, audit.PropReason, "Invalid")...)}}
	}
	for _, step := range []struct {
		name     string
		bindings bindings
		want     []row
	}{
		{"Deny", bindings{newBinding("b", "p")}, failed(audit.Fail, audit.PropBinding, "b", audit.PropValidationActions, "Deny")},
		{"Warn", bindings{newBinding("w", "p", withActions(admissionregistrationv1.Warn))},
			failed(audit.Warn, audit.PropBinding, "w", audit.PropValidationActions, "Warn")},
		{"no binding", nil, failed(audit.Warn, audit.PropValidationActions, "Audit")},
		{"Deny again", bindings{newBinding("b", "p")}, failed(audit.Fail, audit.PropBinding, "b", audit.PropValidationActions, "Deny")},
	} {
		bound := compiled.Bind(step.bindings, testDeps(t))
		if bound.compiled != compiled {
			t.Errorf("%s: the bound policy evaluates a compilation of its own: Bind compiled the policy again", step.name)
		}
		diffRows(t, bound.Evaluate(defaultTestContext, deploymentsGVR, newDeployment("prod", "d", 5)), step.want)
	}
}

// TestWithMatchConstraints narrows a compiled policy's rules, as what-if does to judge an object's next
// UPDATE: the narrowed policy matches what its new rules match, and the policy it came from is unchanged.
func TestWithMatchConstraints(t *testing.T) {
	compiled := CompilePolicy(newPolicy("p", withRules(rule("apps", "v1", "deployments", admissionregistrationv1.Create)),
		withValidation(replicasRule, message("too many"))), Options{})
	rules := func(rules ...admissionregistrationv1.NamedRuleWithOperations) *admissionregistrationv1.MatchResources {
		return &admissionregistrationv1.MatchResources{ResourceRules: rules}
	}
	failed := func(operation string) []row {
		return []row{{"validations[0]", audit.Fail, "too many", denyProps(audit.PropOperation, operation, audit.PropRule, replicasRule, audit.PropReason, "Invalid")}}
	}
	for _, c := range []struct {
		name      string
		policy    *Compiled
		resources []schema.GroupVersionResource
		want      []row
	}{
		{"updates of deployments", compiled.WithMatchConstraints(rules(rule("apps", "v1", "deployments", admissionregistrationv1.Update))),
			[]schema.GroupVersionResource{deploymentsGVR}, failed("UPDATE")},
		{"updates of config maps", compiled.WithMatchConstraints(rules(rule("", "v1", "configmaps", admissionregistrationv1.Update))),
			[]schema.GroupVersionResource{configMapsGVR}, nil},
		{"the policy narrowed from", compiled, []schema.GroupVersionResource{deploymentsGVR}, failed("CREATE")},
	} {
		t.Run(c.name, func(t *testing.T) {
			bound := c.policy.Bind(bindings{newBinding("b", "p")}, testDeps(t))
			if got := bound.Resources(); !slices.Equal(got, c.resources) {
				t.Errorf("Resources() = %v, want %v", got, c.resources)
			}
			diffRows(t, bound.Evaluate(defaultTestContext, deploymentsGVR, newDeployment("prod", "d", 5)), c.want)
		})
	}
}

// TestDeterministic evaluates the same inputs repeatedly, with bindings in different orders and params
// returned in different orders, and expects identical results.
func TestDeterministic(t *testing.T) {
	deny := admissionregistrationv1.DenyAction
	policy := limitsPolicy(withAuditAnnotation("max", "string(params.spec.maxReplicas)"), withValidation("object.metadata.name != 'd'"))
	bs := bindings{
		newBinding("b", "p", paramRef(paramRefSelector(map[string]string{"tier": "limits"}), notFound(deny))),
		newBinding("a", "p", withActions(admissionregistrationv1.Warn), paramRef(paramRefName("strict"), notFound(deny))),
	}
	obj := newDeployment("prod", "d", 5)
	first := CompilePolicy(policy, Options{}).Bind(bs, testDeps(t)).Evaluate(defaultTestContext, deploymentsGVR, obj)
	if len(first) != 5 {
		t.Fatalf("got %d results, want 5: %+v", len(first), first)
	}
	for i := range 20 {
		reordered := slices.Clone(bs)
		if i%2 == 1 {
			slices.Reverse(reordered)
		}
		deps := testDeps(t)
		ps := deps.Params.(params)
		for gvk := range ps {
			if i%3 == 0 {
				slices.Reverse(ps[gvk])
			}
		}
		got := CompilePolicy(policy, Options{}).Bind(reordered, deps).Evaluate(defaultTestContext, deploymentsGVR, obj)
		if !reflect.DeepEqual(got, first) {
			t.Fatalf("run %d differs:\n got %+v\nwant %+v", i, got, first)
		}
		for j := range got {
			if got[j].ID() != first[j].ID() {
				t.Fatalf("run %d: result %d has ID %s, want %s", i, j, got[j].ID(), first[j].ID())
			}
		}
	}
}

func TestEvaluateObjectWithoutKind(t *testing.T) {
	obj := newDeployment("prod", "d", 5)
	obj.SetAPIVersion("")
	obj.SetKind("")
	got := CompilePolicy(newPolicy("p", withValidation(replicasRule, message("too many"))), Options{}).Bind(nil, testDeps(t)).
		Evaluate(defaultTestContext, deploymentsGVR, obj)
	want := audit.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "prod", Name: "d", UID: "uid-d"}
	if len(got) != 1 || got[0].Verdict != audit.Warn || got[0].Resource != want {
		t.Errorf("got %+v, want one warning on %+v", got, want)
	}
	if obj.GetKind() != "" {
		t.Errorf("Evaluate modified its input")
	}
	if got := CompilePolicy(newPolicy("p"), Options{}).Bind(nil, testDeps(t)).Evaluate(defaultTestContext, deploymentsGVR, nil); got != nil {
		t.Errorf("Evaluate(nil) = %+v", got)
	}
}

func TestStaticResolver(t *testing.T) {
	r := testResolver(t)
	if got, want := r.EquivalentResourcesFor(eventsGVR, ""), []schema.GroupVersionResource{coreEventsGVR, eventsGVR}; !slices.Equal(got, want) {
		t.Errorf("EquivalentResourcesFor(events) = %v, want %v", got, want)
	}
	if got, want := r.EquivalentResourcesFor(widgetsV1beta1GVR, ""), []schema.GroupVersionResource{widgetsV1GVR, widgetsV1beta1GVR}; !slices.Equal(got, want) {
		t.Errorf("EquivalentResourcesFor(widgets) = %v, want %v", got, want)
	}
	if got, want := r.KindFor(deploymentsGVR, "scale"), (schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}); got != want {
		t.Errorf("KindFor(deployments/scale) = %v, want %v", got, want)
	}
	if got, err := r.ResourceForKind(limitsGVK); err != nil || got.Resource.Resource != "limits" || !got.Namespaced || !got.Auditable {
		t.Errorf("ResourceForKind(Limits) = %+v, %v", got, err)
	}
	if _, err := r.ResourceForKind(limitsGVK.GroupVersion().WithKind("Missing")); err == nil {
		t.Errorf("ResourceForKind(Missing) succeeded")
	}
	for _, res := range r.ServedResources() {
		if res.Resource.Resource == "pods/status" || res.Resource.Resource == "pods" && res.Kind != "Pod" {
			t.Errorf("ServedResources lists %+v", res)
		}
	}
	if _, err := NewStaticResolver([]*metav1.APIResourceList{{GroupVersion: "a/b/c"}}); err == nil {
		t.Errorf("NewStaticResolver accepted an invalid group version")
	}
}

func TestCompileFailure(t *testing.T) {
	policy := newPolicy("p", withValidation(replicasRule))
	p := CompilePolicy(policy, Options{CompatibilityVersion: &version.Version{}}).Bind(nil, testDeps(t))
	got := p.Evaluate(defaultTestContext, deploymentsGVR, newDeployment("prod", "d", 1))
	want := []row{{"compile", audit.Error, "internal error compiling policy: version must contain an major and minor component, but got: ",
		props("validationActions", "Audit", "operation", "CREATE", "failurePolicy", "Fail")}}
	diffRows(t, got, want)
}

// TestConcurrentEvaluate evaluates one policy from several goroutines, as a scan does (run with -race).
func TestConcurrentEvaluate(t *testing.T) {
	deny := admissionregistrationv1.DenyAction
	p := CompilePolicy(limitsPolicy(withVariable("r", "object.spec.replicas"), withMatchCondition("any", "variables.r >= 0"),
		withAuditAnnotation("max", "string(params.spec.maxReplicas)")),

		Options{}).Bind(

		bindings{newBinding("b", "p", paramRef(paramRefSelector(map[string]string{"tier": "limits"}), notFound(deny)))},
		testDeps(t))

	obj := newDeployment("prod", "d", 5)
	want := p.Evaluate(defaultTestContext, deploymentsGVR, obj)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if got := p.Evaluate(defaultTestContext, deploymentsGVR, obj); !reflect.DeepEqual(got, want) {
					t.Errorf("concurrent Evaluate = %+v, want %+v", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
