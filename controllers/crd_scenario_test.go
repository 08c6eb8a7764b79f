package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/test/envtestutil"
)

const scenarioGroup = "scenario.celaudit.io"

// widgetCRD returns a CRD whose spec has replicas (integer) and the given CEL rules on spec.
func widgetCRD(plural, kind string, scope apiextensionsv1.ResourceScope, rules ...apiextensionsv1.ValidationRule) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + scenarioGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: scenarioGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind, ListKind: kind + "List", Singular: strings.ToLower(kind)},
			Scope: scope,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {
							Type:         "object",
							Properties:   map[string]apiextensionsv1.JSONSchemaProps{"replicas": {Type: "integer"}},
							XValidations: rules,
						},
					},
				}},
			}},
		},
	}
}

func widget(kind, namespace, name string, replicas int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": scenarioGroup + "/v1",
		"kind":       kind,
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"replicas": replicas},
	}}
	u.SetNamespace(namespace)
	return u
}

func mustApply(t *testing.T, objs ...client.Object) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		u := &unstructured.Unstructured{}
		if err := env.Client.Scheme().Convert(o, u, nil); err != nil {
			if uu, ok := o.(*unstructured.Unstructured); ok {
				u = uu
			} else {
				t.Fatalf("converting %T: %v", o, err)
			}
		}
		if u.GetAPIVersion() == "" {
			gvks, _, err := env.Client.Scheme().ObjectKinds(o)
			if err != nil {
				t.Fatal(err)
			}
			u.SetGroupVersionKind(gvks[0])
		}
		if err := envtestutil.Apply(ctx, env.Client, u); err != nil {
			t.Fatal(err)
		}
	}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// celauditResults returns every result listed in celaudit's reports in namespace ns ("" for the cluster
// reports) and their summed summary.
func celauditResults(ctx context.Context, ns string) ([]v1alpha2.PolicyReportResult, v1alpha2.PolicyReportSummary, error) {
	var (
		items []v1alpha2.PolicyReportResult
		sum   v1alpha2.PolicyReportSummary
	)
	sel := client.MatchingLabels{"app.kubernetes.io/managed-by": "celaudit"}
	if ns == "" {
		list := &v1alpha2.ClusterPolicyReportList{}
		if err := env.Client.List(ctx, list, sel); err != nil {
			return nil, sum, err
		}
		for _, r := range list.Items {
			items = append(items, r.Results...)
			sum = addSummary(sum, r.Summary)
		}
	} else {
		list := &v1alpha2.PolicyReportList{}
		if err := env.Client.List(ctx, list, sel, client.InNamespace(ns)); err != nil {
			return nil, sum, err
		}
		for _, r := range list.Items {
			items = append(items, r.Results...)
			sum = addSummary(sum, r.Summary)
		}
	}
	return items, sum, nil
}

// reportResults returns "verdict name: message" for every listed result of celaudit's reports in namespace
// ns ("" for the cluster report), sorted, and the summed summary.
func reportResults(ctx context.Context, ns string) ([]string, v1alpha2.PolicyReportSummary, error) {
	items, sum, err := celauditResults(ctx, ns)
	if err != nil {
		return nil, sum, err
	}
	out := make([]string, 0, len(items))
	for _, r := range items {
		out = append(out, resultLine(r))
	}
	sort.Strings(out)
	return out, sum, nil
}

// resultLine is "verdict name: message" for r.
func resultLine(r v1alpha2.PolicyReportResult) string {
	name := ""
	if len(r.Resources) > 0 {
		name = r.Resources[0].Name
	}
	return fmt.Sprintf("%s %s: %s", r.Result, name, r.Message)
}

func addSummary(a, b v1alpha2.PolicyReportSummary) v1alpha2.PolicyReportSummary {
	a.Pass += b.Pass
	a.Fail += b.Fail
	a.Warn += b.Warn
	a.Error += b.Error
	a.Skip += b.Skip
	return a
}

// expectReport waits until the namespace's reports list exactly want (see reportResults) and count pass passes.
func expectReport(t *testing.T, ns string, pass int, want ...string) {
	t.Helper()
	sort.Strings(want)
	envtestutil.Eventually(t, 30*time.Second, func() error {
		got, sum, err := reportResults(context.Background(), ns)
		if err != nil {
			return err
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") || sum.Pass != pass {
			return fmt.Errorf("report of %q:\n got %q (pass %d)\nwant %q (pass %d)", ns, got, sum.Pass, want, pass)
		}
		return nil
	})
}

// published is what celaudit's reports in one namespace hold: each listed result as JSON, timestamps and
// properties included, sorted, and the summed summary.
type published struct {
	results []string
	summary v1alpha2.PolicyReportSummary
}

// publishedIn returns what celaudit's reports in namespace ns ("" for the cluster reports) hold, leaving out
// of the results those about the object named except, if not "" (the summary counts them).
func publishedIn(ctx context.Context, ns, except string) (published, error) {
	items, sum, err := celauditResults(ctx, ns)
	if err != nil {
		return published{}, err
	}
	out := published{summary: sum}
	for _, r := range items {
		if except != "" && len(r.Resources) > 0 && r.Resources[0].Name == except {
			continue
		}
		data, err := json.Marshal(r)
		if err != nil {
			return published{}, err
		}
		out.results = append(out.results, string(data))
	}
	sort.Strings(out.results)
	return out, nil
}

// mustPublishedIn is publishedIn of every result, failing the test on error.
func mustPublishedIn(t *testing.T, ns string) published {
	t.Helper()
	p, err := publishedIn(context.Background(), ns, "")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// expectOnlyMarkerWritten proves that a change made nothing to write in namespace ns ("" for the cluster
// reports). Call it once the change has been evaluated, after changing a marker object in ns whose only
// result is want: "verdict name: message" (name being the marker's) for a listed result, or "pass name" for a
// pass, which only the summary counts. It waits until the marker's result is published, and checks that
// getting there took one write, that of the marker, and changed nothing else since before (mustPublishedIn
// when counter began counting).
//
// Reports are built from every result computed until then, so when the marker is published, whatever the
// change under test gave to write has been written: in a write of its own, which makes two, or in the
// marker's, whose other results would then differ from before.
func expectOnlyMarkerWritten(t *testing.T, counter *envtestutil.RequestCounter, ns string, before published, want string) {
	t.Helper()
	verdict, rest, _ := strings.Cut(want, " ")
	marker, _, _ := strings.Cut(rest, ":")
	wantSummary := before.summary
	switch v1alpha2.PolicyResult(verdict) {
	case v1alpha2.StatusPass:
		wantSummary.Pass++
	case v1alpha2.StatusFail:
		wantSummary.Fail++
	case v1alpha2.StatusWarn:
		wantSummary.Warn++
	case v1alpha2.StatusError:
		wantSummary.Error++
	default:
		t.Fatalf("marker result %q: want pass, fail, warn or error", want)
	}
	var others published
	envtestutil.Eventually(t, 30*time.Second, func() error {
		items, sum, err := celauditResults(context.Background(), ns)
		if err != nil {
			return err
		}
		if verdict == string(v1alpha2.StatusPass) {
			if sum.Pass < wantSummary.Pass {
				return fmt.Errorf("the reports of %q count %d passes, waiting for the marker's (%d before)", ns, sum.Pass, before.summary.Pass)
			}
		} else if !slices.ContainsFunc(items, func(r v1alpha2.PolicyReportResult) bool { return resultLine(r) == want }) {
			return fmt.Errorf("the reports of %q do not list %q yet", ns, want)
		}
		others, err = publishedIn(context.Background(), ns, marker)
		return err
	})
	writes := counter.Writes("clusterpolicyreports")
	if ns != "" {
		writes = reportWritesIn(counter, ns)
	}
	if writes != 1 {
		t.Errorf("%d writes of the reports of %q, want 1 (the marker's): %v", writes, ns, counter.Snapshot())
	}
	if !slices.Equal(others.results, before.results) {
		t.Errorf("results of %q other than the marker's changed:\nbefore %s\n after %s",
			ns, strings.Join(before.results, "\n       "), strings.Join(others.results, "\n       "))
	}
	if others.summary != wantSummary {
		t.Errorf("summary of %q is %+v, want %+v: the one before and the marker's %s", ns, others.summary, wantSummary, verdict)
	}
}

// apiserverRejection returns the API server's answer to a server-side dry-run create of a copy of obj.
func apiserverRejection(t *testing.T, obj *unstructured.Unstructured) string {
	t.Helper()
	cp := obj.DeepCopy()
	cp.SetName(obj.GetName() + "-dryrun")
	cp.SetResourceVersion("")
	cp.SetUID("")
	err := env.Client.Create(context.Background(), cp, client.DryRunAll)
	if err == nil {
		return ""
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("dry-run create of %s: unexpected error %v", obj.GetName(), err)
	}
	return err.Error()
}

func TestCRDAuditScenario(t *testing.T) {
	ctx := context.Background()
	rule := apiextensionsv1.ValidationRule{Rule: "self.replicas <= 5", Message: "replicas must be at most 5", FieldPath: ".replicas"}
	loose := widgetCRD("widgets", "Widget", apiextensionsv1.NamespaceScoped)
	gadgets := widgetCRD("gadgets", "Gadget", apiextensionsv1.ClusterScoped)
	mustApply(t, loose, gadgets, namespace("scn-a"), namespace("scn-b"))

	good := widget("Widget", "scn-a", "good", 1)
	fixable := widget("Widget", "scn-a", "fixable", 10)
	stays := widget("Widget", "scn-a", "stays", 7)
	doomed := widget("Widget", "scn-b", "doomed", 20)
	wide := widget("Gadget", "", "wide", 9)
	mustApply(t, good, fixable, stays, doomed, wide)

	counter := &envtestutil.RequestCounter{}
	op, stop := envtestutil.StartOperator(t, counter.Wrap(env.Config), envtestutil.TestOptions())
	envtestutil.WaitSettled(t, op)

	// Loose schema: every stored object passes, and passes are counted though not listed.
	expectReport(t, "scn-a", 3)
	expectReport(t, "scn-b", 1)

	// Tighten both CRDs: the report lists exactly the violating objects, with the API server's message.
	mustApply(t, widgetCRD("widgets", "Widget", apiextensionsv1.NamespaceScoped, rule), widgetCRD("gadgets", "Gadget", apiextensionsv1.ClusterScoped, rule))
	msg := "spec.replicas: Invalid value: replicas must be at most 5"
	expectReport(t, "scn-a", 1, "fail fixable: "+msg, "fail stays: "+msg)
	expectReport(t, "scn-b", 0, "fail doomed: "+msg)
	expectReport(t, "", 0, "fail wide: "+msg)
	envtestutil.Eventually(t, 10*time.Second, func() error {
		for _, o := range []*unstructured.Unstructured{fixable, stays, doomed, wide} {
			if rej := apiserverRejection(t, o); !strings.Contains(rej, msg) {
				return fmt.Errorf("API server answer for %s does not contain %q: %q", o.GetName(), msg, rej)
			}
		}
		if rej := apiserverRejection(t, good); rej != "" {
			return fmt.Errorf("API server rejects good: %s", rej)
		}
		return nil
	})

	// Restart with an unchanged cluster: the new operator writes nothing. A marker object in each namespace,
	// changed once the first audit is done, is the one write there.
	stop()
	before := map[string]published{}
	for _, ns := range []string{"scn-a", "scn-b", ""} {
		before[ns] = mustPublishedIn(t, ns)
	}
	restarted := &envtestutil.RequestCounter{}
	op, _ = envtestutil.StartOperator(t, restarted.Wrap(env.Config), envtestutil.TestOptions())
	envtestutil.WaitSettled(t, op)
	// The API server enforces the rule: the markers pass, which the summaries count.
	markers := []*unstructured.Unstructured{widget("Widget", "scn-a", "marker-a", 1), widget("Widget", "scn-b", "marker-b", 1), widget("Gadget", "", "marker-c", 1)}
	mustApply(t, markers[0], markers[1], markers[2])
	expectOnlyMarkerWritten(t, restarted, "scn-a", before["scn-a"], "pass marker-a")
	expectOnlyMarkerWritten(t, restarted, "scn-b", before["scn-b"], "pass marker-b")
	expectOnlyMarkerWritten(t, restarted, "", before[""], "pass marker-c")
	if w := restarted.Writes("policyreports") + restarted.Writes("clusterpolicyreports"); w != len(markers) {
		t.Fatalf("restart with an unchanged cluster: %d report writes, want %d (the markers'): %v", w, len(markers), restarted.Snapshot())
	}
	if restarted.Get("list", "widgets") == 0 {
		t.Fatalf("restarted operator did not read the widgets: %v", restarted.Snapshot())
	}
	for _, m := range markers {
		if err := env.Client.Delete(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	// Fixing an object removes its failure; deleting one removes its results.
	fixable.Object["spec"] = map[string]any{"replicas": int64(3)}
	mustApply(t, fixable)
	expectReport(t, "scn-a", 2, "fail stays: "+msg)
	if err := env.Client.Delete(ctx, doomed); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 30*time.Second, func() error {
		list := &v1alpha2.PolicyReportList{}
		if err := env.Client.List(ctx, list, client.InNamespace("scn-b")); err != nil {
			return err
		}
		if len(list.Items) != 0 {
			return fmt.Errorf("scn-b still has %d reports", len(list.Items))
		}
		return nil
	})

	// Removing the rule clears its failures.
	mustApply(t, widgetCRD("widgets", "Widget", apiextensionsv1.NamespaceScoped))
	expectReport(t, "scn-a", 3)

	// Deleting the CRD removes every result of its objects.
	if err := env.Client.Delete(ctx, gadgets, &client.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 30*time.Second, func() error {
		list := &v1alpha2.ClusterPolicyReportList{}
		if err := env.Client.List(ctx, list); err != nil {
			return err
		}
		for _, r := range list.Items {
			for _, res := range r.Results {
				if res.Policy == "gadgets."+scenarioGroup {
					return fmt.Errorf("result of deleted CRD still reported: %+v", res)
				}
			}
		}
		return nil
	})
}
