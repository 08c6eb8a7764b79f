package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// openReportsCRDs are the OpenReports CRDs as config/openreports installs them.
func openReportsCRDs() envtest.CRDInstallOptions {
	return envtest.CRDInstallOptions{
		Paths:              []string{filepath.Join(envtestutil.RepoRoot(), "config", "openreports")},
		ErrorIfPathMissing: true,
	}
}

// installOpenReports installs the OpenReports CRDs, which the shared control plane lacks unless a test
// installed them: TestOpenReportsCRDsMissing removes them.
func installOpenReports(t *testing.T) {
	t.Helper()
	if _, err := envtest.InstallCRDs(env.Config, openReportsCRDs()); err != nil {
		t.Fatalf("installing the OpenReports CRDs: %v", err)
	}
}

// openReportsOptions returns test options writing reports in api, in chunks of at most 4 results.
func openReportsOptions(api string) controllers.Options {
	o := envtestutil.TestOptions()
	o.ReportAPI = api
	o.MaxResultsPerReport = 4
	return o
}

// ownerLabelPolicy warns about Namespaces and config maps without an owner label in the namespaces labelled
// label, and is deleted when the test ends.
func ownerLabelPolicy(t *testing.T, name, label string) {
	t.Helper()
	policy, binding := boundPolicy(name, "has(object.metadata.labels) && 'owner' in object.metadata.labels", "an owner label is required",
		coreRule("namespaces", "configmaps"), []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector(label)})
	create(t, policy, binding)
	deleteAfter(t, binding, policy)
}

// comparable keeps of a report what celaudit publishes: its name, labels and content.
func comparable(p v1alpha2.PolicyReport) v1alpha2.PolicyReport {
	return v1alpha2.PolicyReport{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels},
		Scope:      p.Scope, ScopeSelector: p.ScopeSelector, Summary: p.Summary, Results: p.Results,
	}
}

// publishedBoth returns celaudit's PolicyReports of namespace ("" for ClusterPolicyReports) and its Reports
// (ClusterReports) converted to the same form, each sorted by name. It fails when a Report's top-level source
// is not celaudit.
func publishedBoth(ctx context.Context, namespace string) (wg, or []v1alpha2.PolicyReport, err error) {
	sel := client.MatchingLabels{report.ManagedByLabel: report.ManagedByValue}
	if namespace == "" {
		var cprs v1alpha2.ClusterPolicyReportList
		var crs openreportsv1alpha1.ClusterReportList
		if err := env.Client.List(ctx, &cprs, sel); err != nil {
			return nil, nil, err
		}
		if err := env.Client.List(ctx, &crs, sel); err != nil {
			return nil, nil, err
		}
		for _, c := range cprs.Items {
			wg = append(wg, comparable(v1alpha2.PolicyReport{ObjectMeta: c.ObjectMeta, Scope: c.Scope, ScopeSelector: c.ScopeSelector, Summary: c.Summary, Results: c.Results}))
		}
		for i := range crs.Items {
			if crs.Items[i].Source != "celaudit" {
				return nil, nil, fmt.Errorf("ClusterReport %s has source %q", crs.Items[i].Name, crs.Items[i].Source)
			}
			c := report.FromClusterReport(&crs.Items[i])
			or = append(or, comparable(v1alpha2.PolicyReport{ObjectMeta: c.ObjectMeta, Scope: c.Scope, ScopeSelector: c.ScopeSelector, Summary: c.Summary, Results: c.Results}))
		}
	} else {
		var prs v1alpha2.PolicyReportList
		var rs openreportsv1alpha1.ReportList
		if err := env.Client.List(ctx, &prs, sel, client.InNamespace(namespace)); err != nil {
			return nil, nil, err
		}
		if err := env.Client.List(ctx, &rs, sel, client.InNamespace(namespace)); err != nil {
			return nil, nil, err
		}
		for _, p := range prs.Items {
			wg = append(wg, comparable(p))
		}
		for i := range rs.Items {
			if rs.Items[i].Source != "celaudit" {
				return nil, nil, fmt.Errorf("Report %s/%s has source %q", namespace, rs.Items[i].Name, rs.Items[i].Source)
			}
			or = append(or, comparable(report.FromReport(&rs.Items[i])))
		}
	}
	byName := func(a, b v1alpha2.PolicyReport) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(wg, byName)
	slices.SortFunc(or, byName)
	return wg, or, nil
}

// expectMirrored waits until celaudit's Reports of namespace equal its PolicyReports, result for result, in
// at least minChunks chunks.
func expectMirrored(t *testing.T, namespace string, minChunks int) []v1alpha2.PolicyReport {
	t.Helper()
	var wg []v1alpha2.PolicyReport
	envtestutil.Eventually(t, 30*time.Second, func() error {
		var or []v1alpha2.PolicyReport
		var err error
		if wg, or, err = publishedBoth(context.Background(), namespace); err != nil {
			return err
		}
		if len(wg) < minChunks {
			return fmt.Errorf("%d PolicyReports in %q, want at least %d chunks", len(wg), namespace, minChunks)
		}
		if !equality.Semantic.DeepEqual(wg, or) {
			return fmt.Errorf("in %q the Reports differ from the PolicyReports:\nPolicyReports %v\nReports       %v", namespace, names(wg), names(or))
		}
		return nil
	})
	return wg
}

func names(rs []v1alpha2.PolicyReport) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s(%d results)", r.Name, len(r.Results)))
	}
	return out
}

// reportWrites returns the writes of every report kind counted by c.
func reportWrites(c *envtestutil.RequestCounter) map[string]int {
	out := map[string]int{}
	for _, res := range []string{"policyreports", "clusterpolicyreports", "reports", "clusterreports"} {
		if n := c.Writes(res); n > 0 {
			out[res] = n
		}
	}
	return out
}

// sameResults reports whether the reports of a and b that list results list the same, under the same names,
// whatever they count: a pass, only counted, may go to a chunk of its own.
func sameResults(a, b []v1alpha2.PolicyReport) bool {
	listed := func(reports []v1alpha2.PolicyReport) map[string][]v1alpha2.PolicyReportResult {
		out := map[string][]v1alpha2.PolicyReportResult{}
		for _, r := range reports {
			if len(r.Results) > 0 {
				out[r.Name] = r.Results
			}
		}
		return out
	}
	return equality.Semantic.DeepEqual(listed(a), listed(b))
}

// passes returns the passes the summaries of reports count.
func passes(reports []v1alpha2.PolicyReport) int {
	n := 0
	for _, r := range reports {
		n += r.Summary.Pass
	}
	return n
}

// expectOnlyPassMarkersWritten proves that nothing is left to write, in either API, in the reports of
// namespace and in the cluster's: it adds two markers, objects that pass the owner label policy selecting
// namespaces labelled label (a ConfigMap in namespace and a Namespace, both named marker), waits until both
// APIs count their passes, and checks that counter saw one write of each report kind, in namespace and in the
// cluster, and that no listed result changed. It returns namespace's PolicyReports then.
//
// Reports are built from every result computed until then, so when a marker is counted, whatever was left to
// write has been written: in a write of its own, which makes two, or in the marker's, whose listed results
// would then differ from before. A pass is only counted, never listed, so the marker itself changes no
// result's timestamp, which the two APIs would have to agree on in further writes.
func expectOnlyPassMarkersWritten(t *testing.T, counter *envtestutil.RequestCounter, namespace, label, marker string) []v1alpha2.PolicyReport {
	t.Helper()
	ctx := context.Background()
	before := map[string][]v1alpha2.PolicyReport{}
	for _, scope := range []string{namespace, ""} {
		wg, _, err := publishedBoth(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		before[scope] = wg
	}
	counter.Reset()
	create(t, labelledConfigMap(namespace, marker, map[string]string{"owner": "me"}),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: marker, Labels: map[string]string{label: "yes", "owner": "me"}}})
	after := map[string][]v1alpha2.PolicyReport{}
	for _, scope := range []string{namespace, ""} {
		envtestutil.Eventually(t, 30*time.Second, func() error {
			wg, or, err := publishedBoth(ctx, scope)
			if err != nil {
				return err
			}
			if want := passes(before[scope]) + 1; passes(wg) != want || passes(or) != want {
				return fmt.Errorf("the reports of %q count %d passes (PolicyReports) and %d (Reports), want %d with the marker's",
					scope, passes(wg), passes(or), want)
			}
			if !equality.Semantic.DeepEqual(wg, or) {
				return fmt.Errorf("in %q the Reports differ from the PolicyReports:\nPolicyReports %v\nReports       %v", scope, names(wg), names(or))
			}
			after[scope] = wg
			return nil
		})
		if !sameResults(after[scope], before[scope]) {
			t.Errorf("the results listed in %q changed:\nbefore %+v\n after %+v", scope, before[scope], after[scope])
		}
	}
	want := map[string]int{"policyreports": 1, "reports": 1, "clusterpolicyreports": 1, "clusterreports": 1}
	got := reportWrites(counter)
	for _, res := range []string{"policyreports", "reports"} {
		if in := counter.GetIn("create", res, namespace) + counter.GetIn("update", res, namespace) +
			counter.GetIn("patch", res, namespace) + counter.GetIn("delete", res, namespace); in != got[res] {
			t.Errorf("%d writes of %s outside %s: %v", got[res]-in, res, namespace, counter.Snapshot())
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("report writes %v, want %v: one of each kind, the markers'", got, want)
	}
	return after[namespace]
}

// With --report-api=both, the OpenReports Reports and ClusterReports equal the PolicyReports and
// ClusterPolicyReports result for result, chunk for chunk; an idle cluster gets no writes of either but those
// of a change made to see it, also from a restarted operator, which builds the same reports again; and a Report deleted by hand is written
// again while its PolicyReport is left as it is.
func TestOpenReportsMirrorPolicyReports(t *testing.T) {
	installOpenReports(t)
	const ns, label = "or-both", "or-both-audit"
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}})
	for i := range 5 {
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", ns, i), Labels: map[string]string{label: "yes"}}})
	}
	for i := range 20 {
		create(t, configMap(ns, fmt.Sprintf("cm-%02d", i), nil))
	}
	ownerLabelPolicy(t, "or-both-owner", label)

	counter := &envtestutil.RequestCounter{}
	op, stop := envtestutil.StartOperator(t, counter.Wrap(env.Config), openReportsOptions(controllers.ReportAPIBoth))
	envtestutil.WaitSettled(t, op)
	var warns []string
	for i := range 20 {
		warns = append(warns, fmt.Sprintf("warn cm-%02d: an owner label is required", i))
	}
	expectReportContains(t, ns, warns...)
	expectMirrored(t, ns, 2)
	expectMirrored(t, "", 2)

	// Idle: nothing is left to write, in either API.
	published := expectOnlyPassMarkersWritten(t, counter, ns, label, "or-both-marker-1")

	// A restart builds the same reports: nothing is written.
	stop()
	restarted := &envtestutil.RequestCounter{}
	op, _ = envtestutil.StartOperator(t, restarted.Wrap(env.Config), openReportsOptions(controllers.ReportAPIBoth))
	envtestutil.WaitSettled(t, op)
	if again := expectOnlyPassMarkersWritten(t, restarted, ns, label, "or-both-marker-2"); !sameResults(again, published) {
		t.Fatalf("the reports changed across a restart: %v, then %v", names(published), names(again))
	}
	published = expectMirrored(t, ns, 2)

	// A Report deleted by hand comes back as it was; its PolicyReport is not written.
	chunk := published[1].Name
	pr := getReport(t, ns, chunk)
	restarted.Reset()
	if err := env.Client.Delete(context.Background(), &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: chunk}}); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 30*time.Second, func() error {
		if restarted.GetIn("create", "reports", ns) == 0 {
			return fmt.Errorf("the deleted Report %s was not created again: %v", chunk, restarted.Snapshot())
		}
		return nil
	})
	if again := expectMirrored(t, ns, 2); !equality.Semantic.DeepEqual(again, published) {
		t.Fatalf("the Report written again differs: %v, then %v", names(published), names(again))
	}
	assertUntouched(t, pr)
	if w := reportWrites(restarted); w["policyreports"] != 0 || w["reports"] != 1 {
		t.Fatalf("restoring one Report: writes %v, want one create of a Report", w)
	}
}

// With --report-api=openreports, celaudit writes Reports and ClusterReports only: no PolicyReport is watched
// or written. (PolicyReports are listed, and celaudit's deleted, once the Reports are written: a previous
// --report-api may have left them; see TestSwitchingReportAPIRemovesTheOldReports.)
func TestOpenReportsOnly(t *testing.T) {
	installOpenReports(t)
	const ns, label = "or-only", "or-only-audit"
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}},
		configMap(ns, "cm", nil))
	ownerLabelPolicy(t, "or-only-owner", label)
	counter := &envtestutil.RequestCounter{}
	op, _ := envtestutil.StartOperator(t, counter.Wrap(env.Config), openReportsOptions(controllers.ReportAPIOpenReports))
	envtestutil.WaitSettled(t, op)
	envtestutil.Eventually(t, 30*time.Second, func() error {
		var rs openreportsv1alpha1.ReportList
		if err := env.Client.List(context.Background(), &rs, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(rs.Items) != 1 || len(rs.Items[0].Results) != 1 || rs.Items[0].Results[0].Description != "an owner label is required" {
			return fmt.Errorf("Reports in %s: %+v", ns, rs.Items)
		}
		return nil
	})
	var prs v1alpha2.PolicyReportList
	if err := env.Client.List(context.Background(), &prs, client.InNamespace(ns)); err != nil || len(prs.Items) != 0 {
		t.Fatalf("PolicyReports in %s: %d, err %v; want none", ns, len(prs.Items), err)
	}
	for _, res := range []string{"policyreports", "clusterpolicyreports"} {
		for _, verb := range []string{"get", "watch", "create", "update", "patch"} {
			if n := counter.Get(verb, res); n != 0 {
				t.Errorf("%d %s requests of %s", n, verb, res)
			}
		}
	}
}

// A Report celaudit did not write, holding the name celaudit wants, is left alone: celaudit publishes that
// chunk as a Report named celaudit.1, and says so with a Warning Event on the other Report. Its PolicyReport
// keeps the name celaudit, which no other report holds.
func TestOpenReportsForeignReportHoldingTheName(t *testing.T) {
	installOpenReports(t)
	ctx := context.Background()
	const ns, label = "or-taken", "or-taken-audit"
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}},
		configMap(ns, "cm", nil))
	theirs := &openreportsv1alpha1.Report{
		ObjectMeta: metav1.ObjectMeta{Name: "celaudit", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "someone-else"}},
		Source:     "another-tool",
		Summary:    openreportsv1alpha1.ReportSummary{Fail: 1},
		Results: []openreportsv1alpha1.ReportResult{{
			Source: "another-tool", Policy: "their-policy", Result: "fail", Description: "their own finding",
			Timestamp: metav1.Timestamp{Seconds: 1_700_000_000},
		}},
	}
	other := &openreportsv1alpha1.Report{ // another tool's, under a name celaudit does not want
		ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: ns},
		Source:     "another-tool",
	}
	create(t, theirs, other)
	original, originalOther := theirs.DeepCopy(), other.DeepCopy()
	ownerLabelPolicy(t, "or-taken-owner", label)

	counter := &envtestutil.RequestCounter{}
	op, _ := envtestutil.StartOperator(t, counter.Wrap(env.Config), openReportsOptions(controllers.ReportAPIBoth))
	envtestutil.WaitSettled(t, op)
	expectReportNames(t, ns, "celaudit")
	var wg, or []v1alpha2.PolicyReport
	envtestutil.Eventually(t, 30*time.Second, func() error {
		var err error
		if wg, or, err = publishedBoth(ctx, ns); err != nil {
			return err
		}
		if len(or) != 1 || or[0].Name != "celaudit.1" || len(wg) != 1 {
			return fmt.Errorf("celaudit's Reports in %s: %v, PolicyReports %v", ns, names(or), names(wg))
		}
		return nil
	})
	if !equality.Semantic.DeepEqual(wg[0].Results, or[0].Results) || wg[0].Summary != or[0].Summary {
		t.Errorf("the Report under another name differs from the PolicyReport:\n%+v\n%+v", or[0], wg[0])
	}
	envtestutil.Eventually(t, 30*time.Second, func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "Report" && e.Regarding.Name == "celaudit" && e.Reason == "ReportNameTaken" && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("no ReportNameTaken Event on Report %s/celaudit among %d Events", ns, len(list.Items))
	})

	// A change is published; the other tool's Reports are never written.
	update(t, configMap(ns, "cm", nil), func(c *corev1.ConfigMap) { c.Labels = map[string]string{"owner": "me"} })
	create(t, configMap(ns, "cm2", nil))
	expectReport(t, ns, 1, "warn cm2: an owner label is required")
	for _, want := range []*openreportsv1alpha1.Report{original, originalOther} {
		got := &openreportsv1alpha1.Report{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != want.ResourceVersion {
			t.Errorf("Report %s/%s, not celaudit's, was written: %+v", ns, want.Name, got)
		}
	}
	if got := counter.StatusIn("create", "reports", ns, http.StatusConflict); got != 1 {
		t.Errorf("%d creates of Reports in %s refused as conflicting, want 1", got, ns)
	}
	for _, verb := range []string{"update", "patch", "delete"} {
		if n := counter.GetIn(verb, "reports", ns); n > 1 || (verb != "update" && n != 0) {
			t.Errorf("%d %s requests of Reports in %s", n, verb, ns)
		}
	}
}

// celaudit does not install report CRDs: without those of the API chosen, it does not start, and says which
// CRD is missing and how to install it. An unknown API is refused as well.
func TestOpenReportsCRDsMissing(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"reports.openreports.io", "clusterreports.openreports.io"} {
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := env.Client.Delete(ctx, crd); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	disc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, time.Minute, func() error {
		if _, err := disc.ServerResourcesForGroupVersion("openreports.io/v1alpha1"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("openreports.io/v1alpha1 still served: %w", err)
		}
		return nil
	})
	t.Cleanup(func() { installOpenReports(t) })

	for _, api := range []string{controllers.ReportAPIOpenReports, controllers.ReportAPIBoth} {
		_, err := controllers.NewOperator(env.Config, openReportsOptions(api))
		if err == nil {
			t.Fatalf("--report-api=%s started without the OpenReports CRDs", api)
		}
		t.Logf("--report-api=%s: %v", api, err)
		for _, want := range []string{"--report-api=" + api, "reports.openreports.io", "clusterreports.openreports.io", "config/openreports", "does not install"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("--report-api=%s: the error lacks %q: %v", api, want, err)
			}
		}
	}
	// The PolicyReport CRDs are installed: the default starts.
	if _, err := controllers.NewOperator(env.Config, openReportsOptions(controllers.ReportAPIWGPolicy)); err != nil {
		t.Fatalf("--report-api=wgpolicy: %v", err)
	}
	if _, err := controllers.NewOperator(env.Config, openReportsOptions("policyreports")); err == nil || !strings.Contains(err.Error(), "invalid --report-api") {
		t.Fatalf("an unknown --report-api: %v", err)
	}
}
