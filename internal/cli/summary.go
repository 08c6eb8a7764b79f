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
	openReportsGVR          = schema.GroupVersionResource{Group: openreportsv1alpha1.GroupVersion.Group, Version: openreportsv1alpha1.GroupVersion.Version, Resource: "reports"}
	openClusterReportsGVR   = schema.GroupVersionResource{Group: openreportsv1alpha1.GroupVersion.Group, Version: openreportsv1alpha1.GroupVersion.Version, Resource: "clusterreports"}
	auditPoliciesGVR        = v1alpha1.GroupVersion.WithResource("auditpolicies")
	vapsGVR                 = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies")
	vapBindingsGVR          = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicybindings")
	crdsGVR                 = apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")
	mapsGVR                 = admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingadmissionpolicies")
	mapBindingsGVR          = admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingadmissionpolicybindings")
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
	// does, Unknown when it cannot be told (see results.SafetyOf); SafeToEnforceReason says why. Empty (left
	// out of JSON) for a MutatingAdmissionPolicy: its warn results are drift, not objects it would refuse.
	SafeToEnforce       metav1.ConditionStatus `json:"safeToEnforce,omitempty"`
	SafeToEnforceReason string                 `json:"safeToEnforceReason,omitempty"`
	// Drifted counts, for a MutatingAdmissionPolicy, the stored objects it would change on their next write:
	// its warn results (one per object). Nil for other policies.
	Drifted *int64 `json:"drifted,omitempty"`
}

// SafetyPassesNotListed is the reason of a policy whose safety summary cannot tell: the reports only count
// passes, so whether the policy judged any object is not known.
const SafetyPassesNotListed = "PassesNotListed"

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
	// subresources are the subresources each ValidatingAdmissionPolicy covers, which no audit judges.
	subresources map[audit.PolicyKey][]string
}

func newSummaryCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "summary",
		Short: "Per policy, the results in celaudit's reports and whether it is safe to enforce",
		Long: `summary reads celaudit's reports (all namespaces, or the one given with -n), the AuditPolicies' status,
and the cluster's CRDs and ValidatingAdmissionPolicies, and prints per policy the objects it matches and its
results. A policy is safe to enforce (True) when it judged objects and none of its results is a fail, warn or
error; False when some is; Unknown when it cannot be told: it judged nothing, some results are skips or about
a resource it cannot read, it covers subresources, or the reports do not list passes.

The reports are read in whichever API the cluster holds them: PolicyReports and ClusterPolicyReports
(wgpolicyk8s.io, the operator's --report-api=wgpolicy), Reports and ClusterReports (openreports.io,
--report-api=openreports), or both (--report-api=both), where a result listed in both APIs counts once.
Each result is filed under the kind of policy its property policyKind names. DRIFTED counts, for each
bound MutatingAdmissionPolicy, the stored objects it would change on their next write (its warn results).
A MutatingAdmissionPolicy refuses nothing, so its SAFE TO ENFORCE and REASON are "-" (absent in -o json).

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
	if err != nil {
		return in, err
	}
	boundMAPs, err := boundMAPs(ctx, client)
	in.policies = append(in.policies, boundMAPs...)
	return in, err
}

// boundMAPs returns the MutatingAdmissionPolicies that some binding binds: those celaudit audits, listed even
// when no report lists a result of theirs.
func boundMAPs(ctx context.Context, client dynamic.Interface) ([]audit.PolicyKey, error) {
	bound := map[string]bool{}
	err := listAll(ctx, client, mapBindingsGVR, "", metav1.ListOptions{}, func(u *unstructured.Unstructured) error {
		if name, _, _ := unstructured.NestedString(u.Object, "spec", "policyName"); name != "" {
			bound[name] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []audit.PolicyKey
	err = listAll(ctx, client, mapsGVR, "", metav1.ListOptions{}, func(u *unstructured.Unstructured) error {
		if bound[u.GetName()] {
			out = append(out, audit.MAPKey(u.GetName()))
		}
		return nil
	})
	return out, err
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
	counts := map[audit.PolicyKey]*results.Summary{}
	add := func(k audit.PolicyKey) *results.Summary {
		if counts[k] == nil {
			counts[k] = &results.Summary{}
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
			countResult(add(audit.PolicyKey{Source: source, Name: r.Policy}), r)
		}
		out.UnlistedPasses += sc.unlistedPasses
	}
	// Passes the reports count without listing them cannot be told apart by policy.
	passesListed := out.UnlistedPasses == 0
	for _, k := range in.policies {
		add(k)
	}
	for k, c := range counts {
		if k.Source == audit.SourceAuditPolicy && aps[k.Name] != nil {
			continue // from its status below
		}
		s := PolicySummary{Source: k.Source, Policy: k.Name,
			Fail: int64(c.Fail), Warn: int64(c.Warn), Error: int64(c.Error), Skip: int64(c.Skip), Drifted: driftedOf(k, c)}
		if passesListed {
			pass, matched := int64(c.Pass), int64(c.Pass)+s.Fail+s.Warn+s.Error+s.Skip
			s.Pass, s.Matched = &pass, &matched
		}
		s.SafeToEnforce, s.SafeToEnforceReason = safetyOf(k, c, passesListed, in.subresources[k])
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

// safetyOf returns whether the policy k, whose results are counted in c, is safe to enforce, and why; nothing
// for a MutatingAdmissionPolicy: it never refuses an object, and its warnings are drift.
func safetyOf(k audit.PolicyKey, c *results.Summary, passesListed bool, subresources []string) (metav1.ConditionStatus, string) {
	if k.Source == audit.SourceMAP {
		return "", ""
	}
	safety := results.SafetyOf(*c, true, subresources)
	if !passesListed && safety.Reason == results.SafetyNothingJudged {
		// The passes are there, uncounted by policy: the policy may well have judged objects.
		safety.Reason = SafetyPassesNotListed
	}
	return safety.Status, safety.Reason
}

// driftedOf returns, for a MutatingAdmissionPolicy, the objects it would change: its warn results, one per
// object. Nil for other policies.
func driftedOf(k audit.PolicyKey, c *results.Summary) *int64 {
	if k.Source != audit.SourceMAP {
		return nil
	}
	n := int64(c.Warn)
	return &n
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
		visit := func(namespace string, summary v1alpha2.PolicyReportSummary, items []v1alpha2.PolicyReportResult) {
			sc := scopes[namespace]
			if sc == nil {
				sc = &scope{}
				scopes[namespace] = sc
			}
			counted[namespace] += int64(summary.Pass)
			for i := range items {
				res := &items[i]
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

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printSummaryTable(w io.Writer, list SummaryList) error {
	tw := printers.GetNewTabWriter(w)
	fmt.Fprintln(tw, "SOURCE\tPOLICY\tMATCHED\tPASS\tFAIL\tWARN\tERROR\tSKIP\tDRIFTED\tSAFE TO ENFORCE\tREASON")
	opt := func(n *int64) string {
		if n == nil {
			return "-"
		}
		return strconv.FormatInt(*n, 10)
	}
	for _, s := range list.Policies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", s.Source, s.Policy, opt(s.Matched), opt(s.Pass),
			s.Fail, s.Warn, s.Error, s.Skip, opt(s.Drifted), orDash(string(s.SafeToEnforce)), orDash(s.SafeToEnforceReason))
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
