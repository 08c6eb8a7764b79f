package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/internal/admit"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
)

// The -mutate run: what one (policy, object) pair costs in the MutatingAdmissionPolicy engine (internal/mutate)
// beside the ValidatingAdmissionPolicy engine (internal/engine), on the same stored objects. The objects are
// those of the macro run (plan and build), held in memory as the API server stores them (defaulted, with
// system metadata, without managedFields, which the operator strips); no API server takes part: both engines
// read namespaces, params and discovery from in-memory views, as `kubectl celaudit check` does.
//
// Half of each kind is stored as the MutatingAdmissionPolicies make it (in shape: each policy passes it), the
// other half drifted (each policy that applies changes it), so that both costs are measured on many objects.

const (
	mutTeamLabel   = "team"
	mutTeamValue   = "platform"
	mutMaxSizeAnno = "bench.celaudit.io/max-size"
	// mutOptOut marks a ConfigMap the cm-max policy's matchConditions exclude.
	mutOptOut = "bench.celaudit.io/no-defaults"
	// The pod template the deploy-hardening policy sets.
	mutCPULimit    = "500m"
	mutMemoryLimit = "256Mi"
)

// inShape says whether o is stored as the MutatingAdmissionPolicies make it: half of each kind, in runs of
// thirty objects (three of each kind), independent of which objects break a ValidatingAdmissionPolicy.
func inShape(o *object) bool { return (o.i/30)%2 == 0 }

// optedOut says whether o is a ConfigMap carrying mutOptOut: one ConfigMap in five.
func optedOut(o *object) bool { return o.kind == configMap && (o.i/20)%5 == 4 }

// mutatingPolicies are the MutatingAdmissionPolicies of the run, with their bindings: what platform teams
// typically default. Every binding selects the bench namespaces.
const mutatingPolicies = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: bench-mut-team-label}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [bench.celaudit.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [widgets, gadgets]}
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        !has(object.metadata.labels) ?
          [JSONPatch{op: "add", path: "/metadata/labels", value: {"team": "platform"}}] :
        "team" in object.metadata.labels && object.metadata.labels["team"] == "platform" ? [] :
          [JSONPatch{op: "add", path: "/metadata/labels/team", value: "platform"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: bench-mut-team-label}
spec:
  policyName: bench-mut-team-label
  matchResources: {namespaceSelector: {matchLabels: {celaudit-bench: "yes"}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: bench-mut-deploy-hardening}
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
          containers: object.spec.template.spec.containers.map(c, Object.spec.template.spec.containers{
            name: c.name,
            resources: Object.spec.template.spec.containers.resources{limits: {"cpu": "500m", "memory": "256Mi"}}
          })
        }}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: bench-mut-deploy-hardening}
spec:
  policyName: bench-mut-deploy-hardening
  matchResources: {namespaceSelector: {matchLabels: {celaudit-bench: "yes"}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: bench-mut-cm-max}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  matchConditions:
  - name: not-opted-out
    expression: '!has(object.metadata.annotations) || !("bench.celaudit.io/no-defaults" in object.metadata.annotations)'
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{annotations: {"bench.celaudit.io/max-size": params.data.max}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: bench-mut-cm-max}
spec:
  policyName: bench-mut-cm-max
  paramRef: {name: cm-limits, namespace: bench-params, parameterNotFoundAction: Deny}
  matchResources: {namespaceSelector: {matchLabels: {celaudit-bench: "yes"}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: bench-mut-widget-limits}
spec:
  paramKind: {apiVersion: bench.celaudit.io/v1, kind: Limits}
  matchConstraints:
    resourceRules:
    - {apiGroups: [bench.celaudit.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [widgets]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{spec: Object.spec{maxReplicas: params.spec.maxReplicas}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: bench-mut-widget-limits}
spec:
  policyName: bench-mut-widget-limits
  paramRef: {name: limits, parameterNotFoundAction: Deny}
  matchResources: {namespaceSelector: {matchLabels: {celaudit-bench: "yes"}}}
`

// mapSpec describes one MutatingAdmissionPolicy of mutatingPolicies for the tables.
type mapSpec struct {
	name, what string
	kinds      []kind
}

var mapSpecs = []mapSpec{
	{"bench-mut-team-label", "JSONPatch: a label", []kind{widget, gadget, configMap, deployment}},
	{"bench-mut-deploy-hardening", "ApplyConfiguration: pod template securityContext and resource limits", []kind{deployment}},
	{"bench-mut-cm-max", "ApplyConfiguration: an annotation from params, with matchConditions", []kind{configMap}},
	{"bench-mut-widget-limits", "ApplyConfiguration: a custom resource's field from namespaced params", []kind{widget}},
}

// storedObject is one object as the API server stores it, with what the harness knows of it.
type storedObject struct {
	*object
	gvr schema.GroupVersionResource
	u   *unstructured.Unstructured
}

// mutateFixture is everything both engines read: the stored objects and the cluster views.
type mutateFixture struct {
	objs  []storedObject
	crds  []*apiextensionsv1.CustomResourceDefinition
	views engine.Views
}

// newMutateFixture builds the n objects of the macro run spread over namespaces namespaces, each as the API
// server stores it, and the namespaces, param objects and discovery of the macro run's cluster.
func newMutateFixture(n, namespaces int) (*mutateFixture, error) {
	cs, err := crds()
	if err != nil {
		return nil, err
	}
	preparer, err := admit.NewPreparer(cs)
	if err != nil {
		return nil, err
	}
	f := &mutateFixture{crds: cs}
	if f.views, err = clusterViews(cs, namespaces); err != nil {
		return nil, err
	}
	created := metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	for _, o := range plan(n, namespaces) {
		u, err := storedForm(o, preparer, created)
		if err != nil {
			return nil, err
		}
		f.objs = append(f.objs, storedObject{object: o, gvr: o.kind.resource(), u: u})
	}
	return f, nil
}

// clusterViews returns the discovery (built-in resources and cs), namespaces and param objects of the macro
// run's cluster, as setupCluster creates them.
func clusterViews(cs []*apiextensionsv1.CustomResourceDefinition, namespaces int) (engine.Views, error) {
	var crdObjs, nsObjs, params []*unstructured.Unstructured
	add := func(into *[]*unstructured.Unstructured, obj k8sruntime.Object, gvk schema.GroupVersionKind) error {
		u, err := toUnstructured(obj, gvk)
		*into = append(*into, u)
		return err
	}
	for _, c := range cs {
		if err := add(&crdObjs, c, apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition")); err != nil {
			return engine.Views{}, err
		}
	}
	nsGVK, cmGVK := corev1.SchemeGroupVersion.WithKind("Namespace"), corev1.SchemeGroupVersion.WithKind("ConfigMap")
	if err := add(&nsObjs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: paramsNS}}, nsGVK); err != nil {
		return engine.Views{}, err
	}
	if err := add(&params, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: paramsNS, Name: paramCM, Labels: map[string]string{paramLabel: "limits"}},
		Data: map[string]string{"max": fmt.Sprint(paramCMMax)}}, cmGVK); err != nil {
		return engine.Views{}, err
	}
	for i := range namespaces {
		tier := "dev"
		if i%2 == 0 {
			tier = "prod"
		}
		if err := add(&nsObjs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i), Labels: map[string]string{benchLabel: "yes", "tier": tier}}}, nsGVK); err != nil {
			return engine.Views{}, err
		}
		l := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"maxReplicas": int64(limitsMax)}}}
		l.SetAPIVersion(group + "/v1")
		l.SetKind("Limits")
		l.SetNamespace(nsName(i))
		l.SetName(limitsName)
		params = append(params, l)
	}
	resolver, err := views.FileResources(crdObjs)
	if err != nil {
		return engine.Views{}, err
	}
	nsView, err := views.NewFileNamespaces(nsObjs)
	if err != nil {
		return engine.Views{}, err
	}
	return engine.Views{Resources: resolver, Namespaces: nsView, Params: views.NewFileParams(params)}, nil
}

// storedForm returns o as the API server stores it: written as the macro run writes it, in shape or not (see
// inShape), admitted (defaulted; a custom resource pruned and defaulted from its schema) and given the system
// metadata.
func storedForm(o *object, preparer *admit.Preparer, created metav1.Time) (*unstructured.Unstructured, error) {
	built := o.build()
	gvk := o.kind.resource().GroupVersion().WithKind(o.kind.String())
	u, err := toUnstructured(built, gvk)
	if err != nil {
		return nil, err
	}
	if inShape(o) {
		if err := shape(o, u); err != nil {
			return nil, err
		}
	}
	if optedOut(o) {
		u.SetAnnotations(map[string]string{mutOptOut: "true"})
	}
	u, err = preparer.Prepare(u)
	if err != nil {
		return nil, err
	}
	u.SetUID(types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", o.i)))
	u.SetResourceVersion(fmt.Sprint(1000 + o.i))
	u.SetCreationTimestamp(created)
	if o.kind != configMap {
		u.SetGeneration(1)
	}
	return u, nil
}

// shape makes u as the MutatingAdmissionPolicies leave it, written by hand from mutatingPolicies.
func shape(o *object, u *unstructured.Unstructured) error {
	labels := u.GetLabels()
	labels[mutTeamLabel] = mutTeamValue
	u.SetLabels(labels)
	switch o.kind {
	case widget:
		return unstructured.SetNestedField(u.Object, int64(limitsMax), "spec", "maxReplicas")
	case configMap:
		if !optedOut(o) {
			u.SetAnnotations(map[string]string{mutMaxSizeAnno: fmt.Sprint(paramCMMax)})
		}
	case deployment:
		spec := u.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		spec["securityContext"] = map[string]any{"runAsNonRoot": true}
		for _, c := range spec["containers"].([]any) {
			c.(map[string]any)["resources"] = map[string]any{"limits": map[string]any{"cpu": mutCPULimit, "memory": mutMemoryLimit}}
		}
	}
	return nil
}

func toUnstructured(obj k8sruntime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u, nil
	}
	content, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", gvk.Kind, err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// mutatingObjects returns the compiled MutatingAdmissionPolicies of mutatingPolicies, by name, and their
// bindings.
func mutatingObjects() (map[string]*mutate.Compiled, []*admissionregistrationv1.MutatingAdmissionPolicyBinding, error) {
	compiled := map[string]*mutate.Compiled{}
	var bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	for _, doc := range strings.Split(mutatingPolicies, "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, nil, fmt.Errorf("parsing a mutating policy document: %w", err)
		}
		switch tm.Kind {
		case "MutatingAdmissionPolicy":
			p := &admissionregistrationv1.MutatingAdmissionPolicy{}
			if err := yaml.UnmarshalStrict([]byte(doc), p); err != nil {
				return nil, nil, fmt.Errorf("parsing a MutatingAdmissionPolicy: %w", err)
			}
			compiled[p.Name] = mutate.Compile(p)
		case "MutatingAdmissionPolicyBinding":
			b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
			if err := yaml.UnmarshalStrict([]byte(doc), b); err != nil {
				return nil, nil, fmt.Errorf("parsing a MutatingAdmissionPolicyBinding: %w", err)
			}
			bindings = append(bindings, b)
		default:
			return nil, nil, fmt.Errorf("unexpected kind %q among the mutating policies", tm.Kind)
		}
	}
	return compiled, bindings, nil
}

// The state of a (policy, object) pair, as the tables group them.
const (
	statePass     = "pass"
	stateDrift    = "drift"
	stateFail     = "fail"     // a ValidatingAdmissionPolicy's fail or warn
	stateExcluded = "excluded" // the policy's matchConditions exclude the object: no result
)

// expectedMAP returns what policy must make of o, written from the fixture's construction: "" when the
// policy does not apply to o's kind.
func expectedMAP(policy string, o *object) string {
	for _, s := range mapSpecs {
		if s.name != policy {
			continue
		}
		for _, k := range s.kinds {
			if k != o.kind {
				continue
			}
			switch {
			case policy == "bench-mut-cm-max" && optedOut(o):
				return stateExcluded
			case inShape(o):
				return statePass
			}
			return stateDrift
		}
	}
	return ""
}

// mapState returns the state of policy's pair with an object, from the policy's Outcome on it.
func mapState(out mutate.Outcome, policy string) (string, error) {
	for _, r := range out.Results {
		if r.Policy != policy {
			continue
		}
		switch r.Verdict {
		case audit.Pass:
			return statePass, nil
		case audit.Warn:
			return stateDrift, nil
		}
		return "", fmt.Errorf("%s: %s: %s", policy, r.Verdict, r.Message)
	}
	return stateExcluded, nil
}

// measurement is the cost of one group of evaluations.
type measurement struct {
	pairs      int
	wall, cpu  time.Duration
	mallocs    uint64
	allocBytes uint64
	retained   int64
}

func (m *measurement) add(o measurement) {
	m.pairs += o.pairs
	m.wall += o.wall
	m.cpu += o.cpu
	m.mallocs += o.mallocs
	m.allocBytes += o.allocBytes
	m.retained += o.retained
}

func (m measurement) perPair(v float64) float64 {
	if m.pairs == 0 {
		return 0
	}
	return v / float64(m.pairs)
}

// measureLoop runs evaluate(i, keep) for i in [0, n), each keeping what it returns in keep (its slot of a slice
// allocated beforehand), and returns the wall and CPU time of the loop, its allocations, and the heap still
// held by what was kept once the garbage is collected. pairs is how many (policy, object) pairs the loop
// evaluates.
func measureLoop(n int, evaluate func(i int)) measurement {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cpu0 := processCPU()
	start := time.Now()
	for i := range n {
		evaluate(i)
	}
	wall := time.Since(start)
	cpu := processCPU() - cpu0
	runtime.ReadMemStats(&after)
	m := measurement{wall: wall, cpu: cpu, mallocs: after.Mallocs - before.Mallocs, allocBytes: after.TotalAlloc - before.TotalAlloc}
	runtime.GC()
	runtime.ReadMemStats(&after)
	m.retained = int64(after.HeapAlloc) - int64(before.HeapAlloc)
	return m
}

// processCPU returns the CPU time (user and system) this process used so far, garbage collection included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// groupKey names a group of pairs: a policy (or "" for all of an engine's policies), a kind and a state.
type groupKey struct {
	policy string
	kind   kind
	state  string
}

// mutateResult is what a -mutate run measured.
type mutateResult struct {
	n                int
	kinds            [numKinds]int
	inShape          int
	mapGroups        map[groupKey]measurement // per MutatingAdmissionPolicy, each in a Set of its own
	mapSet           map[groupKey]measurement // all of them in one Set, policy ""
	vapGroups        map[groupKey]measurement // all ValidatingAdmissionPolicies, policy ""
	vapPolicies      int
	typesHeap        int64 // mutate.NewTypes
	mapHeap, vapHeap int64 // compiled and bound policies
	compileMAP       time.Duration
	compileVAP       time.Duration
	buildObjects     time.Duration
	objectsHeap      int64
}

// mutateEngines are the compiled and bound policies of a -mutate run.
type mutateEngines struct {
	single map[string]*mutate.Set // each MutatingAdmissionPolicy in a Set of its own, by name
	all    *mutate.Set            // all of them in one Set
	vaps   *engine.Set
}

// runMutate measures the fixture of n objects; profile, when set, receives the CPU profile of the
// MutatingAdmissionPolicy evaluations.
func runMutate(ctx context.Context, n, namespaces int, profile string) (*mutateResult, error) {
	res := &mutateResult{n: n, mapGroups: map[groupKey]measurement{}, mapSet: map[groupKey]measurement{}, vapGroups: map[groupKey]measurement{}}
	heap0 := heapNow()
	start := time.Now()
	f, err := newMutateFixture(n, namespaces)
	if err != nil {
		return nil, err
	}
	res.buildObjects = time.Since(start)
	res.objectsHeap = heapNow() - heap0
	for _, o := range f.objs {
		res.kinds[o.kind]++
		if inShape(o.object) {
			res.inShape++
		}
	}
	e, err := compileMutate(f, res)
	if err != nil {
		return nil, err
	}
	// Classifying every pair (and checking the MutatingAdmissionPolicies' verdicts against the construction)
	// also warms both engines up.
	mapItems, err := classifyMAP(ctx, f, e)
	if err != nil {
		return nil, err
	}
	vapItems, err := classifyVAP(ctx, f, e)
	if err != nil {
		return nil, err
	}
	measureVAP(ctx, f, vapItems, res)
	if profile != "" {
		pf, err := os.Create(profile)
		if err != nil {
			return nil, err
		}
		defer func() { _ = pf.Close() }()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	measureMAP(ctx, f, e, mapItems, res)
	return res, nil
}

// compileMutate compiles and binds both engines' policies, recording the time and heap it takes in res.
func compileMutate(f *mutateFixture, res *mutateResult) (*mutateEngines, error) {
	deps := vap.Deps{Namespaces: f.views.Namespaces, Params: f.views.Params, Resolver: f.views.Resources}
	h := heapNow()
	types := mutate.NewTypes(f.crds)
	res.typesHeap = heapNow() - h
	h = heapNow()
	start := time.Now()
	compiled, bindings, err := mutatingObjects()
	if err != nil {
		return nil, err
	}
	e := &mutateEngines{single: map[string]*mutate.Set{}}
	all := make([]*mutate.Compiled, 0, len(compiled))
	for name, c := range compiled {
		e.single[name] = mutate.NewSet([]*mutate.Compiled{c}, bindings, types, deps)
		all = append(all, c)
	}
	e.all = mutate.NewSet(all, bindings, types, deps)
	res.compileMAP = time.Since(start)
	res.mapHeap = heapNow() - h

	h = heapNow()
	start = time.Now()
	var vaps []audit.Policy
	for _, p := range policySpecs() {
		policy, binding := p.objects()
		vaps = append(vaps, engine.Bind(engine.Compiler{}.VAP(policy), []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding}, f.views))
	}
	e.vaps = engine.NewSet(vaps...)
	res.compileVAP = time.Since(start)
	res.vapHeap = heapNow() - h
	res.vapPolicies = len(vaps)
	return e, nil
}

// classifyMAP returns the objects of each MutatingAdmissionPolicy's pairs, by policy, kind and state, and
// fails unless every state is the one the construction gives.
func classifyMAP(ctx context.Context, f *mutateFixture, e *mutateEngines) (map[groupKey][]int, error) {
	items := map[groupKey][]int{}
	for i, o := range f.objs {
		for _, s := range mapSpecs {
			want := expectedMAP(s.name, o.object)
			if want == "" {
				continue
			}
			got, err := mapState(e.single[s.name].Evaluate(ctx, o.gvr, o.u), s.name)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", o.kind, o.u.GetName(), err)
			}
			if got != want {
				return nil, fmt.Errorf("%s on %s %s: %s, want %s", s.name, o.kind, o.u.GetName(), got, want)
			}
			k := groupKey{s.name, o.kind, got}
			items[k] = append(items[k], i)
		}
	}
	return items, nil
}

// vapItem is one ValidatingAdmissionPolicy pair: an object (by index) and a policy.
type vapItem struct {
	obj    int
	policy audit.Policy
}

// classifyVAP returns the ValidatingAdmissionPolicy pairs that give a result, by kind and state.
func classifyVAP(ctx context.Context, f *mutateFixture, e *mutateEngines) (map[groupKey][]vapItem, error) {
	items := map[groupKey][]vapItem{}
	for i, o := range f.objs {
		eo := engine.NewObject(o.gvr, o.u)
		for _, p := range e.vaps.For(o.gvr) {
			for _, r := range eo.Evaluate(ctx, p) {
				state := statePass
				switch r.Verdict {
				case audit.Pass:
				case audit.Fail, audit.Warn:
					state = stateFail
				default:
					return nil, fmt.Errorf("%s on %s %s: %s: %s", p.Key().Name, o.kind, o.u.GetName(), r.Verdict, r.Message)
				}
				k := groupKey{"", o.kind, state}
				items[k] = append(items[k], vapItem{i, p})
			}
		}
	}
	return items, nil
}

// measureVAP measures the ValidatingAdmissionPolicy pairs, group by group, into res.
func measureVAP(ctx context.Context, f *mutateFixture, items map[groupKey][]vapItem, res *mutateResult) {
	for k, group := range items {
		kept := make([][]audit.Result, len(group))
		m := measureLoop(len(group), func(i int) {
			it := group[i]
			o := f.objs[it.obj]
			kept[i] = engine.NewObject(o.gvr, o.u).Evaluate(ctx, it.policy)
		})
		runtime.KeepAlive(kept)
		m.pairs = len(group)
		res.vapGroups[k] = m
	}
}

// measureMAP measures the MutatingAdmissionPolicy pairs into res: each policy's in its own Set, group by group,
// then every object against all of them in one Set, by kind and state.
func measureMAP(ctx context.Context, f *mutateFixture, e *mutateEngines, items map[groupKey][]int, res *mutateResult) {
	for k, group := range items {
		s := e.single[k.policy]
		kept := make([]mutate.Outcome, len(group))
		m := measureLoop(len(group), func(i int) {
			o := f.objs[group[i]]
			kept[i] = s.Evaluate(ctx, o.gvr, o.u)
		})
		runtime.KeepAlive(kept)
		// An object the matchConditions exclude gets no result, but the policy is evaluated on it: a pair.
		m.pairs = len(group)
		res.mapGroups[k] = m
	}
	byKindState := map[groupKey][]int{}
	for i, o := range f.objs {
		state := stateDrift
		if inShape(o.object) {
			state = statePass
		}
		k := groupKey{"", o.kind, state}
		byKindState[k] = append(byKindState[k], i)
	}
	for k, group := range byKindState {
		kept := make([]mutate.Outcome, len(group))
		m := measureLoop(len(group), func(i int) {
			o := f.objs[group[i]]
			kept[i] = e.all.Evaluate(ctx, o.gvr, o.u)
		})
		pairs := 0
		for _, out := range kept {
			pairs += len(out.Results)
		}
		runtime.KeepAlive(kept)
		m.pairs = pairs
		res.mapSet[k] = m
	}
}

func heapNow() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// measureMutate is the -mutate run: it measures -objects objects and writes the markdown section.
func measureMutate(c config) error {
	ctx, cancel := signalContext()
	defer cancel()
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	machine := machineInfo()
	code := codeVersion(repo)
	logf("mutate: %d objects, load average %s", c.objects, machine.LoadAvg)
	res, err := runMutate(ctx, c.objects, c.namespaces, c.cpuProfile)
	if err != nil {
		return err
	}
	w, closeOut, err := openOutput(c.out)
	if err != nil {
		return err
	}
	defer closeOut()
	p := printer(func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) })
	mdMutate(p, res, machine, code, "go run ./test/bench/macro "+strings.Join(os.Args[1:], " "))
	return nil
}

// mdMutate writes the section of one -mutate run.
func mdMutate(p printer, r *mutateResult, m Machine, code, command string) {
	p("#### N = %s objects", thousands(r.n))
	p("")
	p("`%s` — %s, code of %s; %d CPUs (`nproc`), %s, %s; load average at start %s (other builds share the machine).",
		command, m.Date, code, m.NProc, m.GoVersion, m.CPUModel, m.LoadAvg)
	p("")
	p("Objects: %s widgets, %s gadgets, %s ConfigMaps, %s Deployments (%s of them in shape), built in %s, %s of heap. "+
		"Compiled and bound: %d ValidatingAdmissionPolicies in %s (%s of heap); %d MutatingAdmissionPolicies, each in a Set of its own "+
		"and all in one, in %s (%s of heap), beside mutate.NewTypes (built-in scheme and type converter, CRD schemas: %s of heap, once per set of CRDs).",
		thousands(r.kinds[widget]), thousands(r.kinds[gadget]), thousands(r.kinds[configMap]), thousands(r.kinds[deployment]),
		thousands(r.inShape), secs(r.buildObjects.Seconds()), mib(r.objectsHeap),
		r.vapPolicies, secs(r.compileVAP.Seconds()), mib(r.vapHeap), len(mapSpecs), secs(r.compileMAP.Seconds()), mib(r.mapHeap), mib(r.typesHeap))
	p("")
	p("The MutatingAdmissionPolicies (each bound to the bench namespaces):")
	p("")
	for _, s := range mapSpecs {
		p("- `%s`: %s, on %s.", s.name, s.what, kindList(s.kinds))
	}
	p("")
	p("A pair's state: drift (the policy would change the object: a warn result with its patch), pass (already in shape), excluded " +
		"(the policy's matchConditions exclude the object: no result, but the conditions are evaluated), fail (a ValidatingAdmissionPolicy's fail or warn). " +
		"ns/pair is wall time, one goroutine; CPU ns/pair is the process's CPU time, the garbage collector's work on the other core included; " +
		"B retained/pair is the heap the kept results (mutate.Outcome, []audit.Result) still hold after a collection. " +
		"× VAP divides ns/pair by that of all ValidatingAdmissionPolicy pairs on objects of the same kind (pass and fail together).")
	p("")
	mdMutateTable(p, r)
}

// mdMutateTable writes the table of one -mutate run.
func mdMutateTable(p printer, r *mutateResult) {
	p("| engine | policies | kind | pairs | state | ns/pair | CPU ns/pair | allocs/pair | B allocated/pair | B retained/pair | × VAP (same kind) |")
	p("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	vapByKind := map[kind]measurement{}
	var vapAll measurement
	for k, v := range r.vapGroups {
		m := vapByKind[k.kind]
		m.add(v)
		vapByKind[k.kind] = m
		vapAll.add(v)
	}
	row := func(engineName, policies, kindName string, state string, m, ref measurement) {
		ratio := "—"
		if engineName == "MAP" && ref.pairs > 0 && m.pairs > 0 {
			ratio = fmt.Sprintf("%.1f×", m.perPair(float64(m.wall))/ref.perPair(float64(ref.wall)))
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %s |", engineName, policies, kindName, thousands(m.pairs), state,
			thousands(int(m.perPair(float64(m.wall)))), thousands(int(m.perPair(float64(m.cpu)))), m.perPair(float64(m.mallocs)),
			thousands(int(m.perPair(float64(m.allocBytes)))), thousands(int(m.perPair(float64(m.retained)))), ratio)
	}
	states := []string{stateDrift, statePass, stateExcluded}
	for _, s := range mapSpecs {
		for _, k := range s.kinds {
			for _, st := range states {
				if m, ok := r.mapGroups[groupKey{s.name, k, st}]; ok {
					row("MAP", "`"+s.name+"`", k.String(), st, m, vapByKind[k])
				}
			}
		}
	}
	var setAll [2]measurement
	for k := range numKinds {
		for i, st := range []string{stateDrift, statePass} {
			if m, ok := r.mapSet[groupKey{"", k, st}]; ok {
				row("MAP", fmt.Sprintf("all %d in one Set", len(mapSpecs)), k.String(), st, m, vapByKind[k])
				setAll[i].add(m)
			}
		}
	}
	for i, st := range []string{stateDrift, statePass} {
		row("MAP", fmt.Sprintf("all %d in one Set", len(mapSpecs)), "all", st, setAll[i], vapAll)
	}
	var vapStates [2]measurement
	for k := range numKinds {
		for i, st := range []string{stateFail, statePass} {
			if m, ok := r.vapGroups[groupKey{"", k, st}]; ok {
				row("VAP", fmt.Sprintf("the macro run's %d", r.vapPolicies), k.String(), st, m, vapByKind[k])
				vapStates[i].add(m)
			}
		}
	}
	for i, st := range []string{stateFail, statePass} {
		row("VAP", fmt.Sprintf("the macro run's %d", r.vapPolicies), "all", st, vapStates[i], vapAll)
	}
	p("")
}

func kindList(ks []kind) string {
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.String() + "s"
	}
	return strings.Join(names, ", ")
}
