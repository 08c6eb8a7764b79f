package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/dynamic"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/auditpolicy"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/views"
)

// The resources summary reads.
var (
	policyReportsGVR        = v1alpha2.GroupVersion.WithResource("policyreports")
	clusterPolicyReportsGVR = v1alpha2.GroupVersion.WithResource("clusterpolicyreports")
	openReportsGVR          = schema.GroupVersionResource{Group: openreportsv1alpha1.GroupVersion.Group, Version: openreportsv1alpha1.GroupVersion.Version, Resource: "reports"}
	openClusterReportsGVR   = schema.GroupVersionResource{Group: openreportsv1alpha1.GroupVersion.Group, Version: openreportsv1alpha1.GroupVersion.Version, Resource: "clusterreports"}
	auditPoliciesGVR        = v1alpha1.GroupVersion.WithResource("auditpolicies")
	vapsGVR                 = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies")
	vapBindingsGVR          = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicybindings")
	crdsGVR                 = apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")
)

// summaryPageSize is the limit of each LIST summary makes: reports are up to 1 MB each.
const summaryPageSize = 50

// PolicySummary is one policy's line of `kubectl celaudit summary`.
type PolicySummary struct {
	Source audit.PolicySource `json:"source"`
	Policy string             `json:"policy"`
	// Matched and Pass are nil when they cannot be known: passes that reports only count in their summary
	// cannot be told apart by policy (see PolicyReport listing in the README).
	Matched *int64 `json:"matched"`
	Pass    *int64 `json:"pass"`
	Fail    int64  `json:"fail"`
	Warn    int64  `json:"warn"`
	Error   int64  `json:"error"`
	Skip    int64  `json:"skip"`
	// SafeToEnforce: no fail, warn or error among the objects the policy matches.
	SafeToEnforce bool `json:"safeToEnforce"`
}

// SummaryList is the -o json form of summary.
type SummaryList struct {
	Policies []PolicySummary `json:"policies"`
	// UnlistedPasses counts the passes the reports count but do not list, which no policy's Pass includes.
	UnlistedPasses int64 `json:"unlistedPasses"`
	// Unattributed counts the listed results that do not say which kind of policy they come from (the
	// property policyKind, which reports written by an earlier celaudit lack), and which no policy's
	// counts include.
	Unattributed int64 `json:"unattributed,omitempty"`
}

// summaryInputs is what summary reads from the cluster.
type summaryInputs struct {
	// reports holds celaudit's reports in each report API the cluster has them in: PolicyReports, and
	// OpenReports converted to their form.
	reports       []report.Reports
	auditPolicies []v1alpha1.AuditPolicy
	// policies are the CRDs with validation rules and the bound ValidatingAdmissionPolicies celaudit audits,
	// listed even when no report lists a result of theirs.
	policies []audit.PolicyKey
}

func newSummaryCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "summary",
		Short: "Per policy, the results in celaudit's reports and whether it is safe to enforce",
		Long: `summary reads celaudit's reports (all namespaces, or the one given with -n), the AuditPolicies' status,
and the cluster's CRDs and ValidatingAdmissionPolicies, and prints per policy the objects it matches and its
results. A policy is safe to enforce when none of its results is a fail, warn or error.

The reports are read in whichever API the cluster holds them: PolicyReports and ClusterPolicyReports
(wgpolicyk8s.io, the operator's --report-api=wgpolicy), Reports and ClusterReports (openreports.io,
--report-api=openreports), or both (--report-api=both), where a result listed in both APIs counts once.
Each result is filed under the kind of policy its property policyKind names.

Pass and matched counts are exact for AuditPolicies and when the reports list passes (the operator's
--report-results includes pass); otherwise the reports only count passes in their summary and they are shown
as "-".`,
		Example: `  kubectl celaudit summary
  kubectl celaudit summary -n team-a -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != OutputTable && output != OutputJSON {
				return BadInput("unknown output format %q: want table or json", output)
			}
			namespace, explicit, err := flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return BadInput("reading the kubeconfig: %w", err)
			}
			if !explicit || (flags.Namespace != nil && *flags.Namespace == "") {
				namespace = ""
			}
			client, err := dynamicClient(flags)
			if err != nil {
				return err
			}
			in, err := readSummaryInputs(cmd.Context(), client, namespace)
			if err != nil {
				return err
			}
			list := summarize(in)
			if output == OutputJSON {
				return printJSON(streams.Out, list)
			}
			return printSummaryTable(streams.Out, list)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", OutputTable, "Output format: table|json.")
	return cmd
}

// listAll reads every object of gvr in namespace ("" for all) with paginated LISTs of opts.Limit objects
// (default views.DefaultPageSize) and calls each. A resource that is not served (its CRD not installed)
// yields nothing; any other failure is a ClusterError.
func listAll(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions, each func(*unstructured.Unstructured) error) error {
	if opts.Limit == 0 {
		opts.Limit = views.DefaultPageSize
	}
	for {
		list, err := client.Resource(gvr).Namespace(namespace).List(ctx, opts)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return ClusterError("listing %s: %w", gvr.GroupResource(), err)
		}
		for i := range list.Items {
			if err := each(&list.Items[i]); err != nil {
				return err
			}
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return nil
		}
	}
}

// convertInto converts obj into a typed object, naming it on failure.
func convertInto(obj *unstructured.Unstructured, into runtime.Object) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into); err != nil {
		return ClusterError("decoding %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

func readSummaryInputs(ctx context.Context, client dynamic.Interface, namespace string) (summaryInputs, error) {
	var in summaryInputs
	var err error
	if in.reports, err = readReports(ctx, client, namespace); err != nil {
		return in, err
	}
	if in.auditPolicies, err = listTyped[v1alpha1.AuditPolicy](ctx, client, auditPoliciesGVR, "", metav1.ListOptions{}); err != nil {
		return in, err
	}
	bound := map[string]bool{}
	err = listAll(ctx, client, vapBindingsGVR, "", metav1.ListOptions{}, func(u *unstructured.Unstructured) error {
		if name, _, _ := unstructured.NestedString(u.Object, "spec", "policyName"); name != "" {
			bound[name] = true
		}
		return nil
	})
	if err != nil {
		return in, err
	}
	err = listAll(ctx, client, vapsGVR, "", metav1.ListOptions{}, func(u *unstructured.Unstructured) error {
		// The pairs celaudit registers for AuditPolicies are reported under the AuditPolicy.
		if bound[u.GetName()] && u.GetLabels()[auditpolicy.LabelAuditPolicy] == "" {
			in.policies = append(in.policies, audit.VAPKey(u.GetName()))
		}
		return nil
	})
	if err != nil {
		return in, err
	}
	err = listAll(ctx, client, crdsGVR, "", metav1.ListOptions{}, func(u *unstructured.Unstructured) error {
		if hasValidationRules(u.Object) {
			in.policies = append(in.policies, audit.CRDKey(u.GetName()))
		}
		return nil
	})
	return in, err
}

// readReports reads celaudit's reports of namespace ("" for every namespace and the cluster-scoped reports)
// in each report API the cluster serves, the OpenReports converted to the PolicyReport form. An API whose
// CRDs are not installed yields nothing (see listAll); an API that holds no report of celaudit's is left
// out.
func readReports(ctx context.Context, client dynamic.Interface, namespace string) ([]report.Reports, error) {
	managed := metav1.ListOptions{LabelSelector: report.ManagedByLabel + "=" + report.ManagedByValue, Limit: summaryPageSize}
	var wg report.Reports
	var or report.OpenReports
	var err error
	if wg.PolicyReports, err = listTyped[v1alpha2.PolicyReport](ctx, client, policyReportsGVR, namespace, managed); err != nil {
		return nil, err
	}
	if or.Reports, err = listTyped[openreportsv1alpha1.Report](ctx, client, openReportsGVR, namespace, managed); err != nil {
		return nil, err
	}
	if namespace == "" {
		if wg.ClusterPolicyReports, err = listTyped[v1alpha2.ClusterPolicyReport](ctx, client, clusterPolicyReportsGVR, "", managed); err != nil {
			return nil, err
		}
		if or.ClusterReports, err = listTyped[openreportsv1alpha1.ClusterReport](ctx, client, openClusterReportsGVR, "", managed); err != nil {
			return nil, err
		}
	}
	var out []report.Reports
	for _, r := range []report.Reports{wg, report.FromOpenReports(or)} {
		if len(r.PolicyReports)+len(r.ClusterPolicyReports) > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// hasValidationRules reports whether a CRD declares x-kubernetes-validations anywhere in its schemas.
func hasValidationRules(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if k == "x-kubernetes-validations" || hasValidationRules(e) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(v, hasValidationRules)
	}
	return false
}

// summarize aggregates the reports per policy. Each listed result counts once, under the policy its
// property policyKind and its policy name identify, even when both report APIs list it (with the same
// resultID). AuditPolicies take their status, which counts every pass.
func summarize(in summaryInputs) SummaryList {
	aps := map[string]*v1alpha1.AuditPolicy{}
	for i := range in.auditPolicies {
		aps[in.auditPolicies[i].Name] = &in.auditPolicies[i]
	}
	counts := map[audit.PolicyKey]map[audit.Verdict]int64{}
	add := func(k audit.PolicyKey) map[audit.Verdict]int64 {
		if counts[k] == nil {
			counts[k] = map[audit.Verdict]int64{}
		}
		return counts[k]
	}
	var out SummaryList
	for _, sc := range scopesOf(in.reports) {
		for _, r := range sc.results {
			source, ok := audit.SourceOfKind(r.Properties[audit.PropPolicyKind])
			if !ok {
				out.Unattributed++
				continue
			}
			add(audit.PolicyKey{Source: source, Name: r.Policy})[audit.Verdict(r.Result)]++
		}
		out.UnlistedPasses += sc.unlistedPasses
	}
	for _, k := range in.policies {
		add(k)
	}
	for k, c := range counts {
		if k.Source == audit.SourceAuditPolicy && aps[k.Name] != nil {
			continue // from its status below
		}
		s := PolicySummary{Source: k.Source, Policy: k.Name,
			Fail: c[audit.Fail], Warn: c[audit.Warn], Error: c[audit.Error], Skip: c[audit.Skip]}
		if out.UnlistedPasses == 0 {
			pass := c[audit.Pass]
			matched := pass + s.Fail + s.Warn + s.Error + s.Skip
			s.Pass, s.Matched = &pass, &matched
		}
		s.SafeToEnforce = s.Fail == 0 && s.Warn == 0 && s.Error == 0
		out.Policies = append(out.Policies, s)
	}
	for _, ap := range aps {
		st := ap.Status
		s := PolicySummary{Source: audit.SourceAuditPolicy, Policy: ap.Name,
			Matched: &st.Matched, Pass: &st.Pass, Fail: st.Fail, Warn: st.Warn, Error: st.Error, Skip: st.Skip}
		s.SafeToEnforce = s.Fail == 0 && s.Warn == 0 && s.Error == 0 && st.LastAuditTime != nil
		out.Policies = append(out.Policies, s)
	}
	slices.SortFunc(out.Policies, func(a, b PolicySummary) int {
		return audit.PolicyKey{Source: a.Source, Name: a.Policy}.Compare(audit.PolicyKey{Source: b.Source, Name: b.Policy})
	})
	return out
}

// scope is what the reports hold of one namespace ("" for cluster-scoped objects), once: its listed results
// and the passes its reports count without listing them.
type scope struct {
	results        []*v1alpha2.PolicyReportResult
	unlistedPasses int64
}

// scopesOf merges the reports of each API (see summaryInputs) by namespace. A result listed in several APIs
// (the same resultID: --report-api=both writes the same reports to each) is kept once, and a namespace's
// unlisted passes are those of the API that counts the most; reports of one API hold no two results with
// the same ID (see report.BuildCounted).
func scopesOf(apis []report.Reports) map[string]*scope {
	scopes := map[string]*scope{}
	seen := map[string]bool{}
	for _, r := range apis {
		// The passes each namespace's reports count and list in this API.
		counted, listed := map[string]int64{}, map[string]int64{}
		visit := func(namespace string, summary v1alpha2.PolicyReportSummary, results []v1alpha2.PolicyReportResult) {
			sc := scopes[namespace]
			if sc == nil {
				sc = &scope{}
				scopes[namespace] = sc
			}
			counted[namespace] += int64(summary.Pass)
			for i := range results {
				res := &results[i]
				if res.Result == v1alpha2.StatusPass {
					listed[namespace]++
				}
				if id := res.Properties[audit.PropResultID]; id != "" {
					if seen[id] {
						continue
					}
					seen[id] = true
				}
				sc.results = append(sc.results, res)
			}
		}
		for i := range r.ClusterPolicyReports {
			visit("", r.ClusterPolicyReports[i].Summary, r.ClusterPolicyReports[i].Results)
		}
		for i := range r.PolicyReports {
			visit(r.PolicyReports[i].Namespace, r.PolicyReports[i].Summary, r.PolicyReports[i].Results)
		}
		for namespace, n := range counted {
			scopes[namespace].unlistedPasses = max(scopes[namespace].unlistedPasses, n-listed[namespace])
		}
	}
	return scopes
}

func printJSON(w io.Writer, v any) error {
	data, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

func printSummaryTable(w io.Writer, list SummaryList) error {
	tw := printers.GetNewTabWriter(w)
	fmt.Fprintln(tw, "SOURCE\tPOLICY\tMATCHED\tPASS\tFAIL\tWARN\tERROR\tSKIP\tSAFE TO ENFORCE")
	opt := func(n *int64) string {
		if n == nil {
			return "-"
		}
		return strconv.FormatInt(*n, 10)
	}
	for _, s := range list.Policies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%t\n", s.Source, s.Policy, opt(s.Matched), opt(s.Pass),
			s.Fail, s.Warn, s.Error, s.Skip, s.SafeToEnforce)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if list.UnlistedPasses > 0 {
		if _, err := fmt.Fprintf(w, "\n%d passes are counted but not listed in the reports, so they cannot be told apart by policy; list them with the operator's --report-results=pass,fail,warn,error,skip.\n", list.UnlistedPasses); err != nil {
			return err
		}
	}
	if list.Unattributed > 0 {
		_, err := fmt.Fprintf(w, "\n%d listed results do not name the kind of their policy (policyKind): an earlier celaudit wrote them, and they are counted once the operator has rewritten its reports.\n", list.Unattributed)
		return err
	}
	return nil
}
