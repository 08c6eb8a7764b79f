package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// reportKinds are the kinds and resources of one report API, as a test writes them out.
type reportKinds struct {
	api                             string // the value of --report-api
	apiVersion, namespaced, cluster string
	resources                       []string // namespaced, then cluster-scoped
}

var (
	wgpolicyKinds = reportKinds{
		api: controllers.ReportAPIWGPolicy, apiVersion: "wgpolicyk8s.io/v1alpha2", namespaced: "PolicyReport", cluster: "ClusterPolicyReport",
		resources: []string{"policyreports", "clusterpolicyreports"},
	}
	openReportsKinds = reportKinds{
		api: controllers.ReportAPIOpenReports, apiVersion: "openreports.io/v1alpha1", namespaced: "Report", cluster: "ClusterReport",
		resources: []string{"reports", "clusterreports"},
	}
)

// celauditReports returns "namespace/name" of every report of k carrying celaudit's label, in the whole
// cluster, sorted.
func celauditReports(ctx context.Context, k reportKinds) ([]string, error) {
	var out []string
	for _, kind := range []string{k.namespaced, k.cluster} {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(schema.FromAPIVersionAndKind(k.apiVersion, kind+"List"))
		if err := env.Client.List(ctx, l, client.MatchingLabels{report.ManagedByLabel: report.ManagedByValue}); err != nil {
			return nil, err
		}
		for _, item := range l.Items {
			out = append(out, item.Namespace+"/"+item.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// listedIn returns "verdict name: message" for every result listed in celaudit's reports of k in namespace ns
// ("" for the cluster-scoped ones), sorted.
func listedIn(ctx context.Context, k reportKinds, ns string) ([]string, error) {
	if k.api == controllers.ReportAPIWGPolicy {
		lines, _, err := reportResults(ctx, ns)
		return lines, err
	}
	sel := client.MatchingLabels{report.ManagedByLabel: report.ManagedByValue}
	var out []string
	if ns == "" {
		var l openreportsv1alpha1.ClusterReportList
		if err := env.Client.List(ctx, &l, sel); err != nil {
			return nil, err
		}
		for i := range l.Items {
			for _, r := range report.FromClusterReport(&l.Items[i]).Results {
				out = append(out, resultLine(r))
			}
		}
	} else {
		var l openreportsv1alpha1.ReportList
		if err := env.Client.List(ctx, &l, sel, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for i := range l.Items {
			for _, r := range report.FromReport(&l.Items[i]).Results {
				out = append(out, resultLine(r))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// expectListed waits until celaudit's reports of k in namespace ns list exactly want, or, for the cluster
// (""), at least want: other tests' namespaces may have left results there.
func expectListed(t *testing.T, k reportKinds, ns string, want ...string) {
	t.Helper()
	sort.Strings(want)
	envtestutil.Eventually(t, 30*time.Second, func() error {
		got, err := listedIn(context.Background(), k, ns)
		if err != nil {
			return err
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(got, w) })
		if len(missing) > 0 || (ns != "" && len(got) != len(want)) {
			return fmt.Errorf("%ss of %q list %q, want %q", k.namespaced, ns, got, want)
		}
		return nil
	})
}

// foreignReport is a report of k in namespace ns that another tool wrote: it does not carry celaudit's label.
func foreignReport(k reportKinds, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": k.apiVersion, "kind": k.namespaced}}
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(map[string]string{report.ManagedByLabel: "another-tool"})
	return u
}

// ownerWarns returns the result lines of the owner label policy for each name.
func ownerWarns(names ...string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, fmt.Sprintf("warn %s: an owner label is required", n))
	}
	return out
}

// Switching --report-api from one API to the other removes celaudit's reports of the API left, by celaudit's
// label, once the reports of the new API are complete: never before the last of them is written (their
// creation is held back to make the window wide), and including those of a namespace where nothing is left to
// report. Reports of other tools are kept, as is a report another tool created under a name celaudit's had,
// between celaudit's listing and its delete. celaudit runs with the RBAC it ships.
func TestSwitchingReportAPIRemovesTheOldReports(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to reportKinds
	}{
		{"wgpolicy to openreports", wgpolicyKinds, openReportsKinds},
		{"openreports to wgpolicy", openReportsKinds, wgpolicyKinds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			installOpenReports(t)
			ctx := context.Background()
			prefix := "sw-" + tc.from.resources[0][:2]
			label := prefix + "-audit"
			nsA, nsB, nsGone, nsNew := prefix+"-a", prefix+"-b", prefix+"-gone", prefix+"-new"
			for _, ns := range []string{nsA, nsB, nsGone} {
				create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}})
			}
			for i := range 5 {
				create(t, configMap(nsA, fmt.Sprintf("cm-%d", i), nil))
			}
			create(t, configMap(nsB, "cm-0", nil), configMap(nsB, "cm-1", nil), configMap(nsGone, "cm-0", nil))
			theirs := foreignReport(tc.from, nsA, "theirs")
			create(t, theirs)
			ownerLabelPolicy(t, prefix+"-owner", label)
			id := env.ShippedIdentity(t)

			// celaudit writes the reports of the first API.
			_, stop := envtestutil.StartOperator(t, id.Config, openReportsOptions(tc.from.api))
			expectListed(t, tc.from, nsA, ownerWarns("cm-0", "cm-1", "cm-2", "cm-3", "cm-4")...)
			expectListed(t, tc.from, nsB, ownerWarns("cm-0", "cm-1")...)
			expectListed(t, tc.from, nsGone, ownerWarns("cm-0")...)
			expectListed(t, tc.from, "", ownerWarns(nsA, nsB, nsGone)...)
			stop()
			// While it is down, the last object with a result in one namespace goes: nothing is left to
			// report there, in either API. Another namespace comes, with a result: it has no old report.
			if err := env.Client.Delete(ctx, configMap(nsGone, "cm-0", nil)); err != nil {
				t.Fatal(err)
			}
			create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsNew, Labels: map[string]string{label: "yes"}}},
				configMap(nsNew, "cm-0", nil))

			// Restarted with the other API, its writes of new reports held back, those of the new namespace
			// longest: another tool takes the name of one of celaudit's old reports just before celaudit
			// deletes it.
			requests := &envtestutil.RequestLog{
				Hold: func(r envtestutil.Request) time.Duration {
					switch {
					case r.Verb != "create" || !slices.Contains(tc.to.resources, r.Resource):
						return 0
					case r.Namespace == nsNew:
						return 1500 * time.Millisecond
					}
					return 300 * time.Millisecond
				},
			}
			var retaken sync.Once
			recreated := foreignReport(tc.from, nsB, report.NamePrefix)
			requests.Before = func(r envtestutil.Request) {
				if r.Verb != "delete" || r.Resource != tc.from.resources[0] || r.Namespace != nsB || r.Name != report.NamePrefix {
					return
				}
				retaken.Do(func() {
					old := foreignReport(tc.from, nsB, report.NamePrefix)
					if err := env.Client.Delete(ctx, old); err != nil {
						t.Errorf("deleting %s/%s as another tool: %v", nsB, report.NamePrefix, err)
					}
					if err := env.Client.Create(ctx, recreated); err != nil {
						t.Errorf("re-creating %s/%s as another tool: %v", nsB, report.NamePrefix, err)
					}
				})
			}
			op, _ := envtestutil.StartOperator(t, requests.Wrap(id.Config), openReportsOptions(tc.to.api))
			envtestutil.WaitSettled(t, op)
			envtestutil.Eventually(t, 30*time.Second, func() error {
				left, err := celauditReports(ctx, tc.from)
				if err != nil {
					return err
				}
				if len(left) > 0 {
					return fmt.Errorf("celaudit's %ss left: %v", tc.from.namespaced, left)
				}
				return nil
			})

			// The new reports are complete; nothing is published where nothing is left to report.
			expectListed(t, tc.to, nsA, ownerWarns("cm-0", "cm-1", "cm-2", "cm-3", "cm-4")...)
			expectListed(t, tc.to, nsB, ownerWarns("cm-0", "cm-1")...)
			expectListed(t, tc.to, nsGone)
			expectListed(t, tc.to, nsNew, ownerWarns("cm-0")...)
			expectListed(t, tc.to, "", ownerWarns(nsA, nsB, nsGone, nsNew)...)

			// Other tools' reports are kept: the one that was there, and the one that took a name of
			// celaudit's meanwhile, which the delete with celaudit's report's UID did not remove.
			for _, want := range []*unstructured.Unstructured{theirs, recreated} {
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(want.GroupVersionKind())
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
					t.Errorf("%s %s/%s of another tool: %v", want.GetKind(), want.GetNamespace(), want.GetName(), err)
				} else if got.GetUID() != want.GetUID() {
					t.Errorf("%s %s/%s of another tool was replaced", want.GetKind(), want.GetNamespace(), want.GetName())
				}
			}
			if len(requests.Requests(func(r envtestutil.Request) bool { return r.Verb == "delete" && r.Namespace == nsB })) == 0 {
				t.Errorf("celaudit never tried to delete its old report in %s: another tool did not take its name", nsB)
			}

			// No old report was deleted before every new one was written.
			ours := func(ns string) bool { return ns == "" || strings.HasPrefix(ns, prefix+"-") }
			created := requests.Requests(func(r envtestutil.Request) bool {
				return r.Verb == "create" && slices.Contains(tc.to.resources, r.Resource) && r.Status == http.StatusCreated && ours(r.Namespace)
			})
			deleted := requests.Requests(func(r envtestutil.Request) bool {
				return r.Verb == "delete" && slices.Contains(tc.from.resources, r.Resource)
			})
			if len(created) < 5 || len(deleted) < 5 {
				t.Fatalf("%d creates of new reports and %d deletes of old ones, want at least 5 of each", len(created), len(deleted))
			}
			lastCreated := slices.MaxFunc(created, func(a, b envtestutil.Request) int { return a.Answered.Compare(b.Answered) })
			firstDeleted := slices.MinFunc(deleted, func(a, b envtestutil.Request) int { return a.Sent.Compare(b.Sent) })
			if !firstDeleted.Sent.After(lastCreated.Answered) {
				t.Errorf("%s %s/%s was deleted at %s, before one of the %s in %q was created at %s",
					firstDeleted.Resource, firstDeleted.Namespace, firstDeleted.Name, firstDeleted.Sent.Format(time.StampMicro),
					lastCreated.Resource, lastCreated.Namespace, lastCreated.Answered.Format(time.StampMicro))
			}
		})
	}
}
