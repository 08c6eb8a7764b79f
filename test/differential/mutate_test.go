package differential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// mapExpect is the annotation of a compared object saying what the API server does to it, written by hand:
//
//	drift: a no-op write returns the object changed;
//	pass:  a policy applies and the write returns the object unchanged;
//	none:  no policy applies (celaudit has no result) and the write returns it unchanged;
//	error: the API server refuses the write (a policy with failurePolicy Fail failed).
const mapExpect = "celaudit.io/expect"

// mapProbe marks the object whose write shows that the case's policies are in effect: the API server is
// asked until it changes or refuses it. Every case has one.
const mapProbe = "celaudit.io/probe"

// mapCase is one set of MutatingAdmissionPolicies, bindings, params and objects, in a namespace of its own
// ($NS in the documents). Every policy's matchConstraints are confined to that namespace by the harness, so
// that cases run in parallel without judging each other's objects (or other tests' objects).
type mapCase struct {
	name string
	// crd, when set, is installed first.
	crd string
	// nsLabels are the labels of the case's namespace.
	nsLabels map[string]string
	// objects are stored before the policies exist.
	objects []string
	// params are stored with the policies.
	params []string
	// policies are the MutatingAdmissionPolicies and their bindings.
	policies []string
	// operation is the request the API server is asked: UPDATE (a dry-run no-op update of the stored
	// object) unless CREATE (a dry-run create of a renamed copy).
	create bool
}

const mapConfigMap = `
apiVersion: v1
kind: ConfigMap
metadata:
  name: %s
  namespace: $NS
  labels: %s
  annotations: {celaudit.io/expect: %s%s}
data: {k: v}
`

func mapCM(name, labels, expect string, probe bool) string {
	p := ""
	if probe {
		p = ", celaudit.io/probe: \"true\""
	}
	return fmt.Sprintf(mapConfigMap, name, labels, expect, p)
}

func mapBinding(name, spec string) string {
	return fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: %s}
spec: %s
`, name, spec)
}

func mapCases() []mapCase {
	return []mapCase{
		{
			name: "jsonpatch",
			objects: []string{
				mapCM("bare", "{}", "drift", true),
				mapCM("other-label", "{app: web}", "drift", false),
				`
apiVersion: v1
kind: ConfigMap
metadata:
  name: in-shape
  namespace: $NS
  labels: {team: blue}
  annotations: {celaudit.io/expect: pass}
data: {k: v, owner: team-blue}
`,
			},
			policies: []string{`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-jsonpatch}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        has(object.metadata.labels) && "team" in object.metadata.labels ? [] :
        has(object.metadata.labels) ?
          [JSONPatch{op: "add", path: "/metadata/labels/team", value: "blue"}] :
          [JSONPatch{op: "add", path: "/metadata/labels", value: {"team": "blue"}}]
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        "owner" in object.data ? [] :
          [JSONPatch{op: "add", path: "/data/owner", value: "team-" + object.metadata.labels["team"]}]
`, mapBinding("mut-jsonpatch", "{policyName: mut-jsonpatch}")},
		},
		{
			name: "applyconfig-deployment",
			objects: []string{`
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: $NS
  annotations: {celaudit.io/expect: drift, celaudit.io/probe: "true"}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: app, image: "nginx:1.25"}
      - {name: sidecar, image: "envoy:1.30", imagePullPolicy: IfNotPresent}
`, `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: hardened
  namespace: $NS
  annotations: {celaudit.io/expect: pass}
spec:
  selector: {matchLabels: {app: hardened}}
  template:
    metadata: {labels: {app: hardened}}
    spec:
      securityContext: {runAsNonRoot: true}
      containers:
      - {name: app, image: nginx, imagePullPolicy: Always}
`},
			policies: []string{`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-applyconfig}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{
          securityContext: Object.spec.template.spec.securityContext{runAsNonRoot: true},
          containers: [Object.spec.template.spec.containers{name: "app", imagePullPolicy: "Always"}]
        }}}}
`, mapBinding("mut-applyconfig", "{policyName: mut-applyconfig}")},
		},
		{
			name: "params",
			objects: []string{
				mapCM("bare", "{}", "drift", true),
				mapCM("in-shape", "{team: red}", "pass", false),
			},
			params: []string{`
apiVersion: v1
kind: ConfigMap
metadata: {name: team-param, namespace: $NS, labels: {role: param}}
data: {team: red}
`},
			policies: []string{`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-params}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
    objectSelector:
      matchExpressions: [{key: role, operator: DoesNotExist}]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{labels: {"team": params.data.team}}}
`, mapBinding("mut-params", `{policyName: mut-params, paramRef: {name: team-param, namespace: $NS, parameterNotFoundAction: Deny}}`)},
		},
		{
			name: "params-missing",
			objects: []string{
				mapCM("bare", "{}", "error", true),
			},
			policies: []string{`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-params-missing}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{labels: {"team": params.data.team}}}
`, mapBinding("mut-params-missing", `{policyName: mut-params-missing, paramRef: {name: absent, namespace: $NS, parameterNotFoundAction: Deny}}`)},
		},
		{
			name: "matchconditions",
			objects: []string{
				mapCM("app-1", "{}", "drift", true),
				mapCM("other-1", "{}", "none", false),
			},
			policies: []string{`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-matchconditions}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  matchConditions:
  - {name: apps-only, expression: 'object.metadata.name.startsWith("app-")'}
  variables:
  - {name: suffix, expression: 'object.metadata.name.substring(4)'}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "add", path: "/metadata/annotations/instance", value: variables.suffix}]
`, mapBinding("mut-matchconditions", "{policyName: mut-matchconditions}")},
		},
		{
			name:     "selectors",
			nsLabels: map[string]string{"env": "sel"},
			objects: []string{
				mapCM("chosen", "{mutate: \"yes\"}", "drift", true),
				mapCM("left-alone", "{mutate: \"no\"}", "none", false),
			},
			policies: []string{`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-selectors}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{annotations: {"env": namespaceObject.metadata.labels["env"]}}}
`, mapBinding("mut-selectors", `{policyName: mut-selectors, matchResources: {namespaceSelector: {matchLabels: {env: sel}}, objectSelector: {matchLabels: {mutate: "yes"}}}}`)},
		},
		{
			name: "reinvocation",
			objects: []string{
				mapCM("bare", "{}", "drift", true),
				mapCM("done", "{tier: web}", "drift", false),
			},
			policies: []string{`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-reinvoke-a-derive}
spec:
  reinvocationPolicy: IfNeeded
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        has(object.metadata.labels) && "tier" in object.metadata.labels ?
          Object{metadata: Object.metadata{annotations: {"derived-tier": object.metadata.labels["tier"]}}} :
          Object{}
`, mapBinding("mut-reinvoke-a-derive", "{policyName: mut-reinvoke-a-derive}"), `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-reinvoke-b-tier}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{labels: {"tier": "web"}}}
`, mapBinding("mut-reinvoke-b-tier", "{policyName: mut-reinvoke-b-tier}")},
		},
		{
			name: "patch-fails",
			objects: []string{
				mapCM("bare", "{}", "error", true),
			},
			policies: []string{`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-patch-fails}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "remove", path: "/data/absent"}]
`, mapBinding("mut-patch-fails", "{policyName: mut-patch-fails}")},
		},
		{
			name: "patch-fails-ignored",
			objects: []string{
				mapCM("bare", "{}", "drift", true),
			},
			policies: []string{`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-patch-ignored-a}
spec:
  failurePolicy: Ignore
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "remove", path: "/data/absent"}]
`, mapBinding("mut-patch-ignored-a", "{policyName: mut-patch-ignored-a}"), `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-patch-ignored-b}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "add", path: "/data/added", value: "yes"}]
`, mapBinding("mut-patch-ignored-b", "{policyName: mut-patch-ignored-b}")},
		},
		{
			name: "cost",
			objects: []string{
				mapCM("bare", "{}", "error", true),
			},
			policies: []string{mapCostPolicy(), mapBinding("mut-cost", "{policyName: mut-cost}")},
		},
		{
			name: "custom-resource",
			crd: `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.mutate.example.com}
spec:
  group: mutate.example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, default: 1}
              tags:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    value: {type: string}
              limits:
                type: object
                properties:
                  cpu: {type: string}
                  burst: {type: integer, default: 3}
`,
			objects: []string{`
apiVersion: mutate.example.com/v1
kind: Gadget
metadata:
  name: plain
  namespace: $NS
  annotations: {celaudit.io/expect: drift, celaudit.io/probe: "true"}
spec:
  tags: [{name: owner, value: me}]
`, `
apiVersion: mutate.example.com/v1
kind: Gadget
metadata:
  name: in-shape
  namespace: $NS
  annotations: {celaudit.io/expect: pass}
spec:
  tags: [{name: owner, value: me}, {name: managed, value: "true"}]
  limits: {cpu: 100m}
`},
			policies: []string{`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-custom}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [mutate.example.com], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [gadgets]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{spec: Object.spec{tags: [Object.spec.tags{name: "managed", value: "true"}]}}
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        has(object.spec.limits) ? [] : [JSONPatch{op: "add", path: "/spec/limits", value: {"cpu": "100m"}}]
`, mapBinding("mut-custom", "{policyName: mut-custom}")},
		},
		{
			name:   "create-only",
			create: true,
			objects: []string{
				mapCM("bare", "{}", "drift", true),
				mapCM("in-shape", "{origin: created}", "pass", false),
			},
			policies: []string{`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-create-only}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{labels: {"origin": "created"}}}
`, mapBinding("mut-create-only", "{policyName: mut-create-only}")},
		},
	}
}

// mapCostPolicy returns a policy whose variables each stay under the API server's per-expression cost
// limit, so that it is accepted, while together they exceed the runtime cost budget of one mutation. Their
// cost is mostly string traversal, cheap in time, so that the API server answers quickly even under load.
func mapCostPolicy() string {
	var list []string
	for i := range 30 {
		list = append(list, fmt.Sprint(i))
	}
	l := "[" + strings.Join(list, ",") + "]"
	long := strings.Repeat("A", 10000)
	var vars, refs []string
	for i := range 12 {
		vars = append(vars, fmt.Sprintf("  - {name: v%d, expression: '%s.all(x, %s.all(y, \"%s\".lowerAscii() != \"%d\"))'}", i, l, l, long, i))
		refs = append(refs, fmt.Sprintf("variables.v%d", i))
	}
	return fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: mut-cost}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  variables:
%s
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        %s ? [JSONPatch{op: "add", path: "/data/costly", value: "yes"}] : []
`, strings.Join(vars, "\n"), strings.Join(refs, " && "))
}

// TestMutatingPoliciesMatchAPIServer stores each case's objects, then its policies, and checks, object by
// object, that the patch celaudit computes turns the stored object into exactly what the API server returns
// for a dry-run write of it (or that both refuse it, with the same message).
func TestMutatingPoliciesMatchAPIServer(t *testing.T) {
	cl := newVAPClients(t)
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, c := range mapCases() {
		for _, o := range c.objects {
			counts[annotationOf(t, o, mapExpect)]++
		}
	}
	// The cases must keep covering every kind of answer, so that the comparison cannot silently shrink.
	for _, want := range []string{"drift", "pass", "none", "error"} {
		if counts[want] == 0 {
			t.Fatalf("no fixture object expects %q: %v", want, counts)
		}
	}
	for _, c := range mapCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runMAPCase(t, cl, kube, c)
		})
	}
}

func annotationOf(t *testing.T, doc, key string) string {
	t.Helper()
	u := mapDecode(t, doc, "x")
	return u.GetAnnotations()[key]
}

func mapDecode(t *testing.T, doc, ns string) *unstructured.Unstructured {
	t.Helper()
	content := map[string]any{}
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(doc, "$NS", ns)), &content); err != nil {
		t.Fatalf("decoding %s: %v", doc, err)
	}
	return &unstructured.Unstructured{Object: content}
}

func runMAPCase(t *testing.T, cl *vapClients, kube kubernetes.Interface, c mapCase) {
	ctx := t.Context()
	ns := "mut-" + c.name
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: c.nsLabels}}
	if err := env.Client.Create(ctx, nsObj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var want []schema.GroupVersionKind
	if c.crd != "" {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict([]byte(c.crd), crd); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if err := envtestutil.WaitEstablished(ctx, env.Client, crd.Name); err != nil {
			t.Fatal(err)
		}
		want = append(want, schema.GroupVersionKind{Group: crd.Spec.Group, Version: crd.Spec.Versions[0].Name, Kind: crd.Spec.Names.Kind})
	}
	resolver, err := vapResolver(ctx, cl.discovery, want)
	if err != nil {
		t.Fatal(err)
	}

	// The objects are stored before the policies exist: they have drifted from what the policies make.
	var objects []*unstructured.Unstructured
	for _, doc := range c.objects {
		obj := mapDecode(t, doc, ns)
		if err := vapCreate(ctx, cl.dyn, resolver, obj); err != nil {
			t.Fatal(err)
		}
		objects = append(objects, obj)
	}
	for _, doc := range c.params {
		if err := vapCreate(ctx, cl.dyn, resolver, mapDecode(t, doc, ns)); err != nil {
			t.Fatal(err)
		}
	}
	var compiled []*mutate.Compiled
	var bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	for _, doc := range c.policies {
		doc = strings.ReplaceAll(doc, "$NS", ns)
		if strings.Contains(doc, "kind: MutatingAdmissionPolicyBinding") {
			b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
			if err := yaml.UnmarshalStrict([]byte(doc), b); err != nil {
				t.Fatal(err)
			}
			created, err := kube.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("creating binding %s: %v", b.Name, err)
			}
			t.Cleanup(func() {
				_ = kube.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
			})
			bindings = append(bindings, created)
			continue
		}
		p := &admissionregistrationv1.MutatingAdmissionPolicy{}
		if err := yaml.UnmarshalStrict([]byte(doc), p); err != nil {
			t.Fatal(err)
		}
		confine(p, ns)
		created, err := kube.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating policy %s: %v", p.Name, err)
		}
		t.Cleanup(func() {
			_ = kube.AdmissionregistrationV1().MutatingAdmissionPolicies().Delete(context.Background(), p.Name, metav1.DeleteOptions{})
		})
		// celaudit compiles the policy as the API server stores it.
		compiled = append(compiled, mutate.Compile(created))
	}

	for _, obj := range objects {
		if obj.GetAnnotations()[mapProbe] == "true" {
			waitForMAP(t, cl, resolver, obj, c.create)
		}
	}

	var crds []*apiextensionsv1.CustomResourceDefinition
	if c.crd != "" {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict([]byte(c.crd), crd); err != nil {
			t.Fatal(err)
		}
		crds = append(crds, crd)
	}
	set := mutate.NewSet(compiled, bindings, mutate.NewTypes(crds), vap.Deps{
		Namespaces: views.NewLiveNamespaces(ctx, cl.dyn),
		Params:     views.NewLiveParams(ctx, cl.dyn, resolver, 500),
		Resolver:   resolver,
	})

	for _, obj := range objects {
		t.Run(obj.GetName(), func(t *testing.T) {
			compareMAP(t, cl, resolver, set, obj, c.create)
		})
	}
}

// confine limits p to the namespace ns. A policy that says nothing of reinvocation is never reinvoked
// (the field is required).
func confine(p *admissionregistrationv1.MutatingAdmissionPolicy, ns string) {
	if p.Spec.ReinvocationPolicy == "" {
		p.Spec.ReinvocationPolicy = admissionregistrationv1.NeverReinvocationPolicy
	}
	p.Spec.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{ns},
	}}}
}

// mapAnswer is the API server's answer to a dry-run write: the object it would store, or its refusal.
type mapAnswer struct {
	object  map[string]any
	refusal string
}

// askMAP asks the API server for a dry-run no-op UPDATE of the stored object obj, or a dry-run CREATE of a
// renamed copy.
func askMAP(ctx context.Context, cl *vapClients, resolver vap.ResourceResolver, stored *unstructured.Unstructured, create bool) (mapAnswer, error) {
	r, err := resolver.ResourceForKind(stored.GroupVersionKind())
	if err != nil {
		return mapAnswer{}, err
	}
	res := vapResource(cl.dyn, r.Resource, stored.GetNamespace())
	var out *unstructured.Unstructured
	if create {
		copy := createCopy(stored)
		out, err = res.Create(ctx, copy, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	} else {
		out, err = res.Update(ctx, stored.DeepCopy(), metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	}
	var status *apierrors.StatusError
	switch {
	case errors.As(err, &status):
		return mapAnswer{refusal: status.ErrStatus.Message}, nil
	case err != nil:
		return mapAnswer{}, err
	}
	return mapAnswer{object: out.Object}, nil
}

// createCopy is stored as a new object: renamed, without the fields the API server sets on create.
func createCopy(stored *unstructured.Unstructured) *unstructured.Unstructured {
	c := stored.DeepCopy()
	c.SetName(stored.GetName() + "-copy")
	for _, f := range []string{"resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"} {
		unstructured.RemoveNestedField(c.Object, "metadata", f)
	}
	return c
}

// crdNotYetAvailable is how the API server's mutating policies refuse an object whose custom resource
// definition their type resolver has not seen yet.
const crdNotYetAvailable = "There can be a delay between when CustomResourceDefinitions are created and when they are available"

// waitForMAP waits until the API server applies the case's policies: the write of the probe object changes
// it or is refused.
func waitForMAP(t *testing.T, cl *vapClients, resolver vap.ResourceResolver, obj *unstructured.Unstructured, create bool) {
	t.Helper()
	envtestutil.Eventually(t, 60*time.Second, func() error {
		stored, err := getStored(t.Context(), cl, resolver, obj)
		if err != nil {
			return err
		}
		a, err := askMAP(t.Context(), cl, resolver, stored, create)
		if err != nil {
			return err
		}
		if strings.Contains(a.refusal, crdNotYetAvailable) {
			// The policies' type checker does not know a custom resource's kind yet: a refusal of the API
			// server's, not of the policies.
			return fmt.Errorf("the API server cannot apply policies to %s yet: %s", obj.GetName(), a.refusal)
		}
		if a.refusal != "" || !reflect.DeepEqual(normalizeMAP(a.object, create), normalizeMAP(toJSONMap(stored.Object), create)) {
			return nil
		}
		return fmt.Errorf("the policies do not change %s yet", obj.GetName())
	})
}

func getStored(ctx context.Context, cl *vapClients, resolver vap.ResourceResolver, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	r, err := resolver.ResourceForKind(obj.GroupVersionKind())
	if err != nil {
		return nil, err
	}
	return vapResource(cl.dyn, r.Resource, obj.GetNamespace()).Get(ctx, obj.GetName(), metav1.GetOptions{})
}

// compareMAP compares celaudit's outcome for the stored object with the API server's answer.
func compareMAP(t *testing.T, cl *vapClients, resolver vap.ResourceResolver, set *mutate.Set, obj *unstructured.Unstructured, create bool) {
	ctx := t.Context()
	stored, err := getStored(ctx, cl, resolver, obj)
	if err != nil {
		t.Fatal(err)
	}
	r, err := resolver.ResourceForKind(stored.GroupVersionKind())
	if err != nil {
		t.Fatal(err)
	}
	answer, err := askMAP(ctx, cl, resolver, stored, create)
	if err != nil {
		t.Fatal(err)
	}
	out := set.Evaluate(ctx, r.Resource, stored)
	t.Logf("celaudit: operation %s, denied %q, patch %s, results %+v", out.Operation, out.Denied, mustJSON(out.Patch), out.Results)

	expect := obj.GetAnnotations()[mapExpect]
	checkExpectation(t, expect, out, create)

	if answer.refusal != "" || out.Denied != "" {
		if answer.refusal != out.Denied {
			t.Errorf("refusal:\n  apiserver: %q\n  celaudit:  %q", answer.refusal, out.Denied)
		}
		return
	}
	if expect == "error" {
		t.Errorf("the API server accepted the write of an object expected to be refused")
	}
	storedJSON, err := json.Marshal(stored.Object)
	if err != nil {
		t.Fatal(err)
	}
	patched := storedJSON
	if len(out.Patch) > 0 {
		p, err := jsonpatch.DecodePatch([]byte(mustJSON(out.Patch)))
		if err != nil {
			t.Fatalf("celaudit's patch does not decode: %v", err)
		}
		if patched, err = p.Apply(storedJSON); err != nil {
			t.Fatalf("celaudit's patch does not apply to the stored object: %v", err)
		}
	}
	var got map[string]any
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	gotN, wantN := normalizeMAP(got, create), normalizeMAP(toJSONMap(answer.object), create)
	if !reflect.DeepEqual(gotN, wantN) {
		t.Errorf("stored object patched by celaudit differs from the API server's:\n  celaudit:  %s\n  apiserver: %s", mustJSON(gotN), mustJSON(wantN))
	}
	if (expect == "pass" || expect == "none") && !reflect.DeepEqual(wantN, normalizeMAP(toJSONMap(stored.Object), create)) {
		t.Errorf("the API server changes an object expected to be left alone: %s", mustJSON(wantN))
	}
}

func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

// toJSONMap returns v as encoding/json decodes it (numbers as float64), for comparison.
func toJSONMap(v map[string]any) map[string]any {
	data, _ := json.Marshal(v)
	out := map[string]any{}
	_ = json.Unmarshal(data, &out)
	return out
}

// normalizeMAP drops what the API server sets on every write whatever the policies do: managedFields,
// resourceVersion and generation, and for a created copy its name, uid and creationTimestamp.
func normalizeMAP(obj map[string]any, create bool) map[string]any {
	obj = toJSONMap(obj)
	md, _ := obj["metadata"].(map[string]any)
	for _, f := range []string{"managedFields", "resourceVersion", "generation"} {
		delete(md, f)
	}
	if create {
		for _, f := range []string{"name", "uid", "creationTimestamp"} {
			delete(md, f)
		}
	}
	return obj
}

// checkExpectation checks celaudit's outcome against the object's expectation, written by hand.
func checkExpectation(t *testing.T, expect string, out mutate.Outcome, create bool) {
	t.Helper()
	wantOp := "UPDATE"
	if create {
		wantOp = "CREATE"
	}
	switch expect {
	case "none":
		if len(out.Results) > 0 {
			t.Errorf("no policy applies, celaudit has results %+v", out.Results)
		}
	default:
		if string(out.Operation) != wantOp {
			t.Errorf("judged as %q, want %q", out.Operation, wantOp)
		}
	}
	verdicts := map[string]bool{}
	for _, res := range out.Results {
		verdicts[string(res.Verdict)] = true
	}
	switch expect {
	case "drift":
		if !verdicts["warn"] || len(out.Patch) == 0 {
			t.Errorf("expected drift: a warn result and a patch")
		}
	case "pass":
		if len(verdicts) != 1 || !verdicts["pass"] || len(out.Patch) != 0 {
			t.Errorf("expected only pass results and no patch")
		}
	case "error":
		if !verdicts["error"] || out.Denied == "" {
			t.Errorf("expected an error result and a refusal")
		}
	}
}
