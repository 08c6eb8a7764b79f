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
	"k8s.io/apimachinery/pkg/api/meta"
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
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/vap"
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
	// SafeToEnforce is True when the policy judged objects and none fails, warns or errors, False when some
	// does, Unknown when it cannot be told (see results.SafetyOf); SafeToEnforceReason says why.
	SafeToEnforce       metav1.ConditionStatus `json:"safeToEnforce"`
	SafeToEnforceReason string                 `json:"safeToEnforceReason,omitempty"`
}

// SafetyPassesNotListed is the reason of a policy whose safety summary cannot tell: the reports only count
// passes, so whether the policy judged any object is not known.
const SafetyPassesNotListed = "PassesNotListed"

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
	// subresources are the subresources each ValidatingAdmissionPolicy covers, which no audit judges.
	subresources map[audit.PolicyKey][]string
}

func newSummaryCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "summary",
		Short: "Per policy, the results in celaudit's reports and whether it is safe to enforce",
		Long: `summary reads celaudit's PolicyReports and ClusterPolicyReports (all namespaces, or the one given with
-n), the AuditPolicies' status, and the cluster's CRDs and ValidatingAdmissionPolicies, and prints per
policy the objects it matches and its results. A policy is safe to enforce (True) when it judged objects
and none of its results is a fail, warn or error; False when some is; Unknown when it cannot be told: it
judged nothing, some results are skips or about a resource it cannot read, it covers subresources, or the
reports do not list passes.

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
	bound := map[string][]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	err = listAll(ctx, client, vapBindingsGVR, "", metav1.ListOptions{}, func(u *unstructured.Unstructured) error {
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		if err := convertInto(u, b); err != nil {
			return err
		}
		if b.Spec.PolicyName != "" {
			bound[b.Spec.PolicyName] = append(bound[b.Spec.PolicyName], b)
		}
		return nil
	})
	if err != nil {
		return in, err
	}
	aps := make([]*v1alpha1.AuditPolicy, len(in.auditPolicies))
	for i := range in.auditPolicies {
		aps[i] = &in.auditPolicies[i]
	}
	in.subresources = map[audit.PolicyKey][]string{}
	err = listAll(ctx, client, vapsGVR, "", metav1.ListOptions{}, func(u *unstructured.Unstructured) error {
		// The pairs celaudit registers for AuditPolicies are reported under the AuditPolicy that owns them.
		if len(bound[u.GetName()]) == 0 || auditpolicy.OwnerAmong(u, aps) != nil {
			return nil
		}
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		if err := convertInto(u, p); err != nil {
			return err
		}
		key := audit.VAPKey(u.GetName())
		in.policies = append(in.policies, key)
		if subs := vap.CoveredSubresources(p, bound[u.GetName()]); len(subs) > 0 {
			in.subresources[key] = subs
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
	counts := map[audit.PolicyKey]*results.Summary{}
	add := func(k audit.PolicyKey) *results.Summary {
		if counts[k] == nil {
			counts[k] = &results.Summary{}
		}
		return counts[k]
	}
	var out SummaryList
	passesListed := true
	visit := func(summary v1alpha2.PolicyReportSummary, listed []v1alpha2.PolicyReportResult) {
		var listedPasses int64
		for i := range listed {
			r := &listed[i]
			v := audit.Verdict(r.Result)
			if v == audit.Pass {
				listedPasses++
			}
			countResult(add(sourceOf(r, aps)), r)
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
			Fail: int64(c.Fail), Warn: int64(c.Warn), Error: int64(c.Error), Skip: int64(c.Skip)}
		if passesListed {
			pass, matched := int64(c.Pass), int64(c.Pass)+s.Fail+s.Warn+s.Error+s.Skip
			s.Pass, s.Matched = &pass, &matched
		}
		safety := results.SafetyOf(*c, true, in.subresources[k])
		if !passesListed && safety.Reason == results.SafetyNothingJudged {
			// The passes are there, uncounted by policy: the policy may well have judged objects.
			safety.Reason = SafetyPassesNotListed
		}
		s.SafeToEnforce, s.SafeToEnforceReason = safety.Status, safety.Reason
		out.Policies = append(out.Policies, s)
	}
	for _, ap := range aps {
		st := ap.Status
		s := PolicySummary{Source: audit.SourceAuditPolicy, Policy: ap.Name,
			Matched: &st.Matched, Pass: &st.Pass, Fail: st.Fail, Warn: st.Warn, Error: st.Error, Skip: st.Skip,
			SafeToEnforce: metav1.ConditionUnknown, SafeToEnforceReason: results.SafetyAuditPending}
		// The operator's answer, when it is about this generation.
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSafeToEnforce); c != nil && c.ObservedGeneration == ap.Generation {
			s.SafeToEnforce, s.SafeToEnforceReason = c.Status, c.Reason
		}
		out.Policies = append(out.Policies, s)
	}
	slices.SortFunc(out.Policies, func(a, b PolicySummary) int {
		return audit.PolicyKey{Source: a.Source, Name: a.Policy}.Compare(audit.PolicyKey{Source: b.Source, Name: b.Policy})
	})
	return out
}

// countResult counts a listed result into the summary of its policy. Matched and Judged count the listed
// results about an object (Judged those that are no skip); a result about no object (a resource that cannot
// be read) counts in Resources.
func countResult(s *results.Summary, r *v1alpha2.PolicyReportResult) {
	v := audit.Verdict(r.Result)
	switch {
	case len(r.Resources) == 0:
		s.Resources++
		if v == audit.Error {
			s.ResourceErrors++
		}
	case v == audit.Skip:
		s.Matched++
	default:
		s.Matched++
		s.Judged++
	}
	switch v {
	case audit.Pass:
		s.Pass++
	case audit.Fail:
		s.Fail++
		s.Violating++
	case audit.Warn:
		s.Warn++
		s.Violating++
	case audit.Error:
		s.Error++
	case audit.Skip:
		s.Skip++
	}
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
	fmt.Fprintln(tw, "SOURCE\tPOLICY\tMATCHED\tPASS\tFAIL\tWARN\tERROR\tSKIP\tSAFE TO ENFORCE\tREASON")
	opt := func(n *int64) string {
		if n == nil {
			return "-"
		}
		return strconv.FormatInt(*n, 10)
	}
	for _, s := range list.Policies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", s.Source, s.Policy, opt(s.Matched), opt(s.Pass),
			s.Fail, s.Warn, s.Error, s.Skip, s.SafeToEnforce, s.SafeToEnforceReason)
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
