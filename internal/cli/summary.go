package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

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
}

// summaryInputs is what summary reads from the cluster.
type summaryInputs struct {
	reports       report.Reports
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
		Long: `summary reads celaudit's PolicyReports and ClusterPolicyReports (all namespaces, or the one given with
-n), the AuditPolicies' status, and the cluster's CRDs and ValidatingAdmissionPolicies, and prints per
policy the objects it matches and its results. A policy is safe to enforce when none of its results is a
fail, warn or error.

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
	managed := metav1.ListOptions{LabelSelector: report.ManagedByLabel + "=" + report.ManagedByValue, Limit: summaryPageSize}
	var err error
	if in.reports.PolicyReports, err = listTyped[v1alpha2.PolicyReport](ctx, client, policyReportsGVR, namespace, managed); err != nil {
		return in, err
	}
	if namespace == "" {
		in.reports.ClusterPolicyReports, err = listTyped[v1alpha2.ClusterPolicyReport](ctx, client, clusterPolicyReportsGVR, "", managed)
		if err != nil {
			return in, err
		}
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

// summarize aggregates the reports per policy. Each listed result counts once, under the source its
// properties name: a CRD's carry crdVersion, a VAP's a binding, an AuditPolicy's the binding celaudit
// registers for it. AuditPolicies take their status, which counts every pass.
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
	passesListed := true
	visit := func(summary v1alpha2.PolicyReportSummary, results []v1alpha2.PolicyReportResult) {
		var listedPasses int64
		for i := range results {
			r := &results[i]
			v := audit.Verdict(r.Result)
			if v == audit.Pass {
				listedPasses++
			}
			add(sourceOf(r, aps))[v]++
		}
		if unlisted := int64(summary.Pass) - listedPasses; unlisted > 0 {
			out.UnlistedPasses += unlisted
			passesListed = false
		}
	}
	for i := range in.reports.ClusterPolicyReports {
		r := &in.reports.ClusterPolicyReports[i]
		visit(r.Summary, r.Results)
	}
	for i := range in.reports.PolicyReports {
		r := &in.reports.PolicyReports[i]
		visit(r.Summary, r.Results)
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
		if passesListed {
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

// sourceOf tells which kind of policy produced a listed result.
func sourceOf(r *v1alpha2.PolicyReportResult, aps map[string]*v1alpha1.AuditPolicy) audit.PolicyKey {
	switch {
	case r.Properties[audit.PropCRDVersion] != "":
		return audit.CRDKey(r.Policy)
	case aps[r.Policy] != nil && r.Properties[audit.PropBinding] == auditpolicy.AdmissionName(r.Policy):
		return audit.AuditPolicyKey(r.Policy)
	case r.Properties[audit.PropBinding] != "":
		return audit.VAPKey(r.Policy)
	}
	// A result no rule produced (a resource that cannot be read) names its policy only; CRD names have a
	// dot, policy names may not.
	if strings.Contains(r.Policy, ".") {
		return audit.CRDKey(r.Policy)
	}
	return audit.VAPKey(r.Policy)
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
		_, err := fmt.Fprintf(w, "\n%d passes are counted but not listed in the reports, so they cannot be told apart by policy; list them with the operator's --report-results=pass,fail,warn,error,skip.\n", list.UnlistedPasses)
		return err
	}
	return nil
}
