package differential

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/views"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// The namespaces of the front-end fixture; the policies' bindings confine them to these.
var frontendNamespaces = []string{"fe-a", "fe-b", "fe-c"}

// TestFrontendsAgree evaluates one cluster three ways and requires the same results from each: the
// operator over the stored objects (informer views), a one-shot evaluation of the live cluster (live views,
// paginated reads) and an evaluation of the fixture file alone (file views). The fixture is stored as a
// rollout stores it: objects first, the CRD's rules and the policies after.
func TestFrontendsAgree(t *testing.T) {
	ctx := context.Background()
	objs := readFixture(t, "testdata/frontends/cluster.yaml")
	storeFrontendCluster(t, ctx, objs)

	fromFiles := evaluateFiles(t, ctx, objs)
	// Results written by hand, so that three front ends agreeing on nothing cannot pass: each line lists
	// what one result must contain.
	for _, want := range [][]string{
		{"fail fe-a/ConfigMap/big fe-size: size 9 exceeds 5 [binding=fe-size-a ", "param=fe-a/limits"},
		{"pass fe-b/ConfigMap/big fe-size: ", "binding=fe-size-labelled", "param=fe-b/limits"},
		{"error fe-a/ConfigMap/small fe-size: failed to configure binding: no params found", "binding=fe-size-labelled"},
		{"warn fe-c/ConfigMap/odd fe-team: namespace fe-c names no team [binding=fe-team "},
		{"warn fe-a/Secret/token fe-team: tokens must be short [binding=fe-team "},
		{"fail fe-a/Widget/odd widgets.frontends.example.com: spec: Invalid value: ", "replicas must be even", `severity="high"`},
		{"fail fe-c/Widget/huge widgets.frontends.example.com: spec: Invalid value: ", "size xxl is not one of s, m, l"},
		{"fail fe-b/Widget/long widgets.frontends.example.com: spec.owner: Too long: may not be more than 8 bytes"},
		{"pass fe-a/Widget/even widgets.frontends.example.com: "},
		{"warn fe-c/ConfigMap/odd fe-sized: size must be a number [binding=fe-sized "},
		{"pass fe-b/ConfigMap/big fe-sized: ", "binding=fe-sized"},
		// MutatingAdmissionPolicies: drift on UPDATE, as the stored objects' next write would get it.
		{`warn fe-a/ConfigMap/small fe-team-label: UPDATE would change metadata.labels["fe-team"] [`,
			`patch=[{"op":"add","path":"/metadata/labels/fe-team","value":"set"}]`, "operation=UPDATE",
			`category="MutatingAdmissionPolicy"`},
		{`warn fe-c/ConfigMap/odd fe-team-label: UPDATE would change metadata.labels["fe-team"] [`},
		{`warn fe-a/ConfigMap/big fe-team-label: UPDATE would change metadata.labels["fe-team"] [`,
			`patch=[{"op":"add","path":"/metadata/labels","value":{"fe-team":"set"}}]`},
		{"pass fe-b/ConfigMap/big fe-team-label: already as the policy makes it ["},
		{"warn fe-a/Widget/even fe-owner: UPDATE would change spec.owner [", `patch=[{"op":"add","path":"/spec/owner","value":"platform"}]`,
			`category="ownership"`, `severity="low"`},
		{"pass fe-a/Widget/odd fe-owner: already as the policy makes it ["},
		{"warn fe-c/Widget/huge fe-owner: UPDATE would change spec.owner ["},
	} {
		if !slices.ContainsFunc(fromFiles, func(r string) bool { return containsAll(r, want) }) {
			t.Errorf("evaluating the file: no result with %q among\n%s", want, strings.Join(fromFiles, "\n"))
		}
	}
	// The ConfigMaps without a size are excluded by fe-sized's matchCondition: the API server admits them
	// without a word, and so does every front end (the others must equal the file's results).
	for _, excluded := range []string{" fe-a/ConfigMap/limits fe-sized: ", " fe-b/ConfigMap/limits fe-sized: ",
		" fe-a/ConfigMap/limits fe-team-label: ", " fe-b/ConfigMap/limits fe-team-label: "} {
		if i := slices.IndexFunc(fromFiles, func(r string) bool { return strings.Contains(r, excluded) }); i >= 0 {
			t.Errorf("evaluating the file: a result for an object a matchCondition excludes: %s", fromFiles[i])
		}
	}

	live := evaluateLive(t, ctx, objs)
	if diff := diffLines(fromFiles, live); diff != "" {
		t.Errorf("the live cluster and the file give different results (- file, + live):\n%s", diff)
	}

	opts := envtestutil.TestOptions()
	opts.ReportVerdicts = "pass,fail,warn,error,skip" // passes kept whole, to compare them too
	opts.AuditSecrets = true                          // the other front ends judge the Secret too
	op, _ := envtestutil.StartOperator(t, env.Config, opts)
	envtestutil.WaitSettled(t, op)
	envtestutil.Eventually(t, 30*time.Second, func() error {
		var fromOperator []audit.Result
		for _, ns := range frontendNamespaces {
			res, passes := op.Results.NamespaceCounted(ns)
			if len(passes) > 0 {
				return fmt.Errorf("passes compacted in %s although the operator lists them", ns)
			}
			fromOperator = append(fromOperator, res...)
		}
		if diff := diffLines(fromFiles, resultLines(fromOperator)); diff != "" {
			return fmt.Errorf("the operator and the file give different results (- file, + operator):\n%s", diff)
		}
		return nil
	})
}

// storeFrontendCluster stores objs as a rollout does, and deletes them when the test ends: everything but the
// policy objects first, with the CRD's schema stripped of what the stored objects break, then the CRD as
// written, then the policies and bindings.
func storeFrontendCluster(t *testing.T, ctx context.Context, objs []*unstructured.Unstructured) {
	t.Helper()
	crd, policies, _ := splitFrontendFixture(objs)
	lax := laxWidgetCRD(t, crd)
	t.Cleanup(func() {
		for _, o := range append(append(policies, crd), objs...) {
			_ = client.IgnoreNotFound(env.Client.Delete(context.Background(), o.DeepCopy()))
		}
	})
	if err := envtestutil.Apply(ctx, env.Client, lax); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o != crd && !engine.IsPolicyObject(o) {
			if err := envtestutil.Apply(ctx, env.Client, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := envtestutil.Apply(ctx, env.Client, crd); err != nil {
		t.Fatal(err)
	}
	if err := envtestutil.Apply(ctx, env.Client, policies...); err != nil {
		t.Fatal(err)
	}
}

// splitFrontendFixture returns the fixture's CRD, its policy objects (policies and bindings) and the others.
func splitFrontendFixture(objs []*unstructured.Unstructured) (crd *unstructured.Unstructured, policies, others []*unstructured.Unstructured) {
	for _, o := range objs {
		switch {
		case o.GetKind() == "CustomResourceDefinition":
			crd = o
		case engine.IsPolicyObject(o):
			policies = append(policies, o)
		default:
			others = append(others, o)
		}
	}
	return crd, policies, others
}

// laxWidgetCRD returns the fixture's Widget CRD without what its stored objects break: its rules and the
// owner's maxLength.
func laxWidgetCRD(t *testing.T, crd *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	lax := crd.DeepCopy()
	versions, _, _ := unstructured.NestedSlice(lax.Object, "spec", "versions")
	for _, v := range versions {
		props := v.(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["spec"].(map[string]any)
		delete(props, "x-kubernetes-validations")
		delete(props["properties"].(map[string]any)["owner"].(map[string]any), "maxLength")
	}
	if err := unstructured.SetNestedSlice(lax.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	return lax
}

// evaluateFiles evaluates the objects of the fixture file against its policies, with file views only.
func evaluateFiles(t *testing.T, ctx context.Context, objs []*unstructured.Unstructured) []string {
	t.Helper()
	resources, err := views.FileResources(objs)
	if err != nil {
		t.Fatal(err)
	}
	namespaces, err := views.NewFileNamespaces(objs)
	if err != nil {
		t.Fatal(err)
	}
	v := engine.Views{Resources: resources, Namespaces: namespaces, Params: views.NewFileParams(objs)}
	policies, err := engine.Compiler{}.Compile(objs, v)
	if err != nil {
		t.Fatal(err)
	}
	set := engine.NewSet(policies...)
	var out []audit.Result
	for _, o := range objs {
		if engine.IsPolicyObject(o) || o.GetNamespace() == "" {
			continue
		}
		res, err := v.Resources.ResourceForKind(o.GroupVersionKind())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, evaluateWith(ctx, set, res.Resource, o)...)
	}
	return resultLines(out)
}

// evaluateLive evaluates the stored objects against the stored policies named in the fixture, with live views:
// discovery read once, params and namespaces read on demand, objects read in pages.
func evaluateLive(t *testing.T, ctx context.Context, fixture []*unstructured.Unstructured) []string {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The API server serves a CRD's new schema a moment after it is established: wait until it serves it.
	var resources engine.Views
	envtestutil.Eventually(t, 30*time.Second, func() error {
		r, err := views.LiveResources(ctx, dc)
		if err != nil {
			return err
		}
		if _, err := r.ResourceForKind(schema.GroupVersionKind{Group: "frontends.example.com", Version: "v1", Kind: "Widget"}); err != nil {
			return err
		}
		resources.Resources = r
		return nil
	})
	v := engine.Views{
		Resources:  resources.Resources,
		Namespaces: views.NewLiveNamespaces(ctx, dyn),
		Params:     views.NewLiveParams(ctx, dyn, resources.Resources, 2),
		CRDs:       liveCRDs(t, ctx),
	}
	var stored []*unstructured.Unstructured
	for _, o := range fixture {
		if !engine.IsPolicyObject(o) {
			continue
		}
		res, err := v.Resources.ResourceForKind(o.GroupVersionKind())
		if err != nil {
			t.Fatal(err)
		}
		got, err := dyn.Resource(res.Resource).Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, got)
	}
	policies, err := engine.Compiler{}.Compile(stored, v)
	if err != nil {
		t.Fatal(err)
	}
	set := engine.NewSet(policies...)
	var out []audit.Result
	for _, gvr := range set.Resources() {
		for _, ns := range frontendNamespaces {
			opts := metav1.ListOptions{Limit: 2}
			for {
				list, err := dyn.Resource(gvr).Namespace(ns).List(ctx, opts)
				if err != nil {
					t.Fatal(err)
				}
				for i := range list.Items {
					out = append(out, evaluateWith(ctx, set, gvr, &list.Items[i])...)
				}
				if opts.Continue = list.GetContinue(); opts.Continue == "" {
					break
				}
			}
		}
	}
	return resultLines(out)
}

// liveCRDs returns the cluster's CRDs, whose schemas a MutatingAdmissionPolicy's changes to custom resources
// are merged with.
func liveCRDs(t *testing.T, ctx context.Context) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := env.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out
}

// evaluateWith evaluates obj, read at gvr, with every policy of set covering gvr, as the front ends do.
func evaluateWith(ctx context.Context, set *engine.Set, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	o := engine.NewObject(gvr, obj)
	var out []audit.Result
	for _, p := range set.For(gvr) {
		out = append(out, o.Evaluate(ctx, p)...)
	}
	return out
}

// resultLines renders results as sorted lines, without the objects' UIDs, which files do not have.
func resultLines(results []audit.Result) []string {
	out := make([]string, 0, len(results))
	for _, r := range results {
		keys := make([]string, 0, len(r.Properties))
		for k, v := range r.Properties {
			keys = append(keys, k+"="+v)
		}
		sort.Strings(keys)
		out = append(out, fmt.Sprintf("%s %s/%s/%s %s: %s [%s] rule=%q category=%q severity=%q apiVersion=%s",
			r.Verdict, r.Resource.Namespace, r.Resource.Kind, r.Resource.Name, r.Policy, r.Message,
			strings.Join(keys, " "), r.Rule, r.Category, r.Severity, r.Resource.APIVersion))
	}
	sort.Strings(out)
	return out
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// diffLines returns the lines only in a (-) or only in b (+).
func diffLines(a, b []string) string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}
