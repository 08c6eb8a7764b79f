package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/report"
)

// The values of --report-api.
const (
	ReportAPIWGPolicy    = "wgpolicy"
	ReportAPIOpenReports = "openreports"
	ReportAPIBoth        = "both"
)

// reportAPI is one API celaudit publishes its reports in. Reports are built and diffed in the wgpolicyk8s.io
// form (report.Reports); an API converts them at its boundary: the reports it lists, and the writes it makes.
type reportAPI interface {
	// name names the API in the controller's name and logs.
	name() string
	// kinds returns the namespaced and the cluster-scoped report kind.
	kinds() (namespaced, cluster schema.GroupVersionKind)
	// objects returns an empty namespaced and cluster-scoped report, for watches and the cache.
	objects() []client.Object
	// list returns celaudit's reports in namespace ("" for the cluster-scoped ones), as c holds them.
	list(ctx context.Context, c client.Reader, namespace string) (report.Reports, error)
	// namespaces returns the namespaces ("" for the cluster) holding celaudit's reports, as c holds them.
	namespaces(ctx context.Context, c client.Reader) ([]string, error)
	// writes converts changes to the objects to create, update and delete.
	writes(changes report.Changes) (create, update, remove []client.Object)
	// asReports converts a report of this API to the wgpolicyk8s.io form; false for another object.
	asReports(o client.Object) (report.Reports, bool)
	// install tells how to install the API's CRDs.
	install() string
}

// reportNamespaces returns the namespaces of celaudit's reports in namespaced, and "" when cluster holds any.
// The lists are the cache's, read without copying.
func reportNamespaces(ctx context.Context, c client.Reader, namespaced, cluster client.ObjectList) ([]string, error) {
	if err := c.List(ctx, namespaced, managedSelector(), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing celaudit's reports: %w", err)
	}
	seen := map[string]bool{}
	if err := meta.EachListItem(namespaced, func(o k8sruntime.Object) error {
		if m, err := meta.Accessor(o); err == nil {
			seen[m.GetNamespace()] = true
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading celaudit's reports: %w", err)
	}
	if err := c.List(ctx, cluster, managedSelector(), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing celaudit's cluster reports: %w", err)
	}
	if meta.LenList(cluster) > 0 {
		seen[""] = true
	}
	return slices.Collect(maps.Keys(seen)), nil
}

// managedSelector selects the reports celaudit owns.
func managedSelector() client.MatchingLabels {
	return client.MatchingLabels{report.ManagedByLabel: report.ManagedByValue}
}

// wgpolicyAPI is wgpolicyk8s.io/v1alpha2: PolicyReports and ClusterPolicyReports.
type wgpolicyAPI struct{}

func (wgpolicyAPI) name() string { return "policyreport" }

func (wgpolicyAPI) kinds() (schema.GroupVersionKind, schema.GroupVersionKind) {
	return v1alpha2.GroupVersion.WithKind("PolicyReport"), v1alpha2.GroupVersion.WithKind("ClusterPolicyReport")
}

func (wgpolicyAPI) objects() []client.Object {
	return []client.Object{&v1alpha2.PolicyReport{}, &v1alpha2.ClusterPolicyReport{}}
}

// list reads the reports as the cache holds them: they are not copied (a namespace's reports add up to
// megabytes when it has thousands of violations), so they are read-only.
func (wgpolicyAPI) list(ctx context.Context, c client.Reader, namespace string) (report.Reports, error) {
	var out report.Reports
	if namespace == "" {
		l := &v1alpha2.ClusterPolicyReportList{}
		if err := c.List(ctx, l, managedSelector(), client.UnsafeDisableDeepCopy); err != nil {
			return out, fmt.Errorf("listing ClusterPolicyReports: %w", err)
		}
		out.ClusterPolicyReports = l.Items
		return out, nil
	}
	l := &v1alpha2.PolicyReportList{}
	if err := c.List(ctx, l, managedSelector(), client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return out, fmt.Errorf("listing PolicyReports in %s: %w", namespace, err)
	}
	out.PolicyReports = l.Items
	return out, nil
}

func (wgpolicyAPI) namespaces(ctx context.Context, c client.Reader) ([]string, error) {
	return reportNamespaces(ctx, c, &v1alpha2.PolicyReportList{}, &v1alpha2.ClusterPolicyReportList{})
}

func (wgpolicyAPI) writes(c report.Changes) (create, update, remove []client.Object) {
	create = append(objectsOf(c.PolicyReports.Create), objectsOf(c.ClusterPolicyReports.Create)...)
	update = append(objectsOf(c.PolicyReports.Update), objectsOf(c.ClusterPolicyReports.Update)...)
	remove = append(objectsOf(c.PolicyReports.Delete), objectsOf(c.ClusterPolicyReports.Delete)...)
	return create, update, remove
}

func (wgpolicyAPI) asReports(o client.Object) (report.Reports, bool) {
	switch o := o.(type) {
	case *v1alpha2.PolicyReport:
		return report.Reports{PolicyReports: []v1alpha2.PolicyReport{*o}}, true
	case *v1alpha2.ClusterPolicyReport:
		return report.Reports{ClusterPolicyReports: []v1alpha2.ClusterPolicyReport{*o}}, true
	}
	return report.Reports{}, false
}

func (wgpolicyAPI) install() string {
	return "install them with 'kubectl apply -k config/crd' from celaudit's repository"
}

// openReportsAPI is openreports.io/v1alpha1: Reports and ClusterReports.
type openReportsAPI struct{}

func (openReportsAPI) name() string { return "openreport" }

func (openReportsAPI) kinds() (schema.GroupVersionKind, schema.GroupVersionKind) {
	gv := schema.GroupVersion{Group: openreportsv1alpha1.GroupVersion.Group, Version: openreportsv1alpha1.GroupVersion.Version}
	return gv.WithKind("Report"), gv.WithKind("ClusterReport")
}

func (openReportsAPI) objects() []client.Object {
	return []client.Object{&openreportsv1alpha1.Report{}, &openreportsv1alpha1.ClusterReport{}}
}

// list reads the reports as the cache holds them, uncopied, and converts them: the conversion copies the
// metadata and the few results the cache keeps, and shares the rest, which stays read-only.
func (openReportsAPI) list(ctx context.Context, c client.Reader, namespace string) (report.Reports, error) {
	if namespace == "" {
		l := &openreportsv1alpha1.ClusterReportList{}
		if err := c.List(ctx, l, managedSelector(), client.UnsafeDisableDeepCopy); err != nil {
			return report.Reports{}, fmt.Errorf("listing ClusterReports: %w", err)
		}
		return report.FromOpenReports(report.OpenReports{ClusterReports: l.Items}), nil
	}
	l := &openreportsv1alpha1.ReportList{}
	if err := c.List(ctx, l, managedSelector(), client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return report.Reports{}, fmt.Errorf("listing Reports in %s: %w", namespace, err)
	}
	return report.FromOpenReports(report.OpenReports{Reports: l.Items}), nil
}

func (openReportsAPI) namespaces(ctx context.Context, c client.Reader) ([]string, error) {
	return reportNamespaces(ctx, c, &openreportsv1alpha1.ReportList{}, &openreportsv1alpha1.ClusterReportList{})
}

func (openReportsAPI) writes(c report.Changes) (create, update, remove []client.Object) {
	conv := func(namespaced []v1alpha2.PolicyReport, cluster []v1alpha2.ClusterPolicyReport) []client.Object {
		o := report.ToOpenReports(report.Reports{PolicyReports: namespaced, ClusterPolicyReports: cluster})
		return append(objectsOf(o.Reports), objectsOf(o.ClusterReports)...)
	}
	return conv(c.PolicyReports.Create, c.ClusterPolicyReports.Create),
		conv(c.PolicyReports.Update, c.ClusterPolicyReports.Update),
		conv(c.PolicyReports.Delete, c.ClusterPolicyReports.Delete)
}

func (openReportsAPI) asReports(o client.Object) (report.Reports, bool) {
	switch o := o.(type) {
	case *openreportsv1alpha1.Report:
		return report.FromOpenReports(report.OpenReports{Reports: []openreportsv1alpha1.Report{*o}}), true
	case *openreportsv1alpha1.ClusterReport:
		return report.FromOpenReports(report.OpenReports{ClusterReports: []openreportsv1alpha1.ClusterReport{*o}}), true
	}
	return report.Reports{}, false
}

func (openReportsAPI) install() string {
	return "install them with 'kubectl apply -k config/openreports' from celaudit's repository, or from " +
		"config/crd of github.com/openreports/reports-api, unless a tool that owns them (Kyverno, Kubewarden) installs them"
}

// objectsOf returns pointers to the elements of objs.
func objectsOf[T any, PT interface {
	*T
	client.Object
}](objs []T) []client.Object {
	out := make([]client.Object, 0, len(objs))
	for i := range objs {
		out = append(out, PT(&objs[i]))
	}
	return out
}

// parseReportAPIs returns the report APIs --report-api selects.
func parseReportAPIs(flag string) ([]reportAPI, error) {
	switch strings.TrimSpace(flag) {
	case ReportAPIWGPolicy:
		return []reportAPI{wgpolicyAPI{}}, nil
	case ReportAPIOpenReports:
		return []reportAPI{openReportsAPI{}}, nil
	case ReportAPIBoth:
		return []reportAPI{wgpolicyAPI{}, openReportsAPI{}}, nil
	}
	return nil, fmt.Errorf("invalid --report-api %q: want %s (PolicyReports), %s (OpenReports Reports) or %s",
		flag, ReportAPIWGPolicy, ReportAPIOpenReports, ReportAPIBoth)
}

// retiredAPI returns the report API celaudit does not write when it writes only one: the one whose reports a
// previous --report-api may have left.
func retiredAPI(written []reportAPI) (reportAPI, bool) {
	if len(written) != 1 {
		return nil, false
	}
	if written[0].name() == (wgpolicyAPI{}).name() {
		return openReportsAPI{}, true
	}
	return wgpolicyAPI{}, true
}

// checkInstalled returns an error naming each CRD of api the API server does not serve. celaudit never
// installs report CRDs: other tools own them, and a CRD celaudit installed could replace theirs.
func checkInstalled(mapper meta.RESTMapper, flag string, api reportAPI) error {
	namespaced, cluster := api.kinds()
	var missing []string
	for _, gvk := range []schema.GroupVersionKind{namespaced, cluster} {
		ok, err := served(mapper, gvk)
		if err != nil {
			return err
		}
		if !ok {
			m, _ := meta.UnsafeGuessKindToResource(gvk)
			missing = append(missing, fmt.Sprintf("%s.%s (%s %s)", m.Resource, gvk.Group, gvk.GroupVersion(), gvk.Kind))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("--report-api=%s needs the CRD %s, which the cluster does not serve: %s; "+
		"celaudit does not install report CRDs", flag, strings.Join(missing, " and the CRD "), api.install())
}
