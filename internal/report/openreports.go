package report

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

// OpenReports are reports in the openreports.io/v1alpha1 API: the same reports as Reports, in the API Kyverno,
// Kubewarden and Policy Reporter moved to. Reports are built in the wgpolicyk8s.io form and converted at the
// boundary (ToOpenReports, FromOpenReports), so both APIs publish the same names, labels and results.
type OpenReports struct {
	Reports        []openreportsv1alpha1.Report
	ClusterReports []openreportsv1alpha1.ClusterReport
}

// ToOpenReports converts r to the OpenReports API. The conversion shares r's labels, results' properties and
// resources: like Diff, it takes r over.
func ToOpenReports(r Reports) OpenReports {
	var out OpenReports
	if r.PolicyReports != nil {
		out.Reports = make([]openreportsv1alpha1.Report, len(r.PolicyReports))
		for i := range r.PolicyReports {
			out.Reports[i] = ToReport(&r.PolicyReports[i])
		}
	}
	if r.ClusterPolicyReports != nil {
		out.ClusterReports = make([]openreportsv1alpha1.ClusterReport, len(r.ClusterPolicyReports))
		for i := range r.ClusterPolicyReports {
			out.ClusterReports[i] = ToClusterReport(&r.ClusterPolicyReports[i])
		}
	}
	return out
}

// FromOpenReports converts o to the wgpolicyk8s.io form that Diff, PreviousTimestamps and ChunkCounts read.
// Like ToOpenReports it shares what it can with o.
func FromOpenReports(o OpenReports) Reports {
	var out Reports
	if o.Reports != nil {
		out.PolicyReports = make([]v1alpha2.PolicyReport, len(o.Reports))
		for i := range o.Reports {
			out.PolicyReports[i] = FromReport(&o.Reports[i])
		}
	}
	if o.ClusterReports != nil {
		out.ClusterPolicyReports = make([]v1alpha2.ClusterPolicyReport, len(o.ClusterReports))
		for i := range o.ClusterReports {
			out.ClusterPolicyReports[i] = FromClusterReport(&o.ClusterReports[i])
		}
	}
	return out
}

// ToReport converts a PolicyReport to a Report. The report's top-level source is celaudit's: consumers such
// as Policy Reporter read an OpenReports report's source there, where they read a PolicyReport's from its
// first result.
func ToReport(p *v1alpha2.PolicyReport) openreportsv1alpha1.Report {
	return openreportsv1alpha1.Report{
		TypeMeta:      openreportsTypeMeta(p.TypeMeta, "Report"),
		ObjectMeta:    p.ObjectMeta,
		Source:        audit.Source,
		Scope:         p.Scope,
		ScopeSelector: p.ScopeSelector,
		Summary:       toSummary(p.Summary),
		Results:       toResults(p.Results),
	}
}

// ToClusterReport converts a ClusterPolicyReport to a ClusterReport, as ToReport does.
func ToClusterReport(p *v1alpha2.ClusterPolicyReport) openreportsv1alpha1.ClusterReport {
	return openreportsv1alpha1.ClusterReport{
		TypeMeta:      openreportsTypeMeta(p.TypeMeta, "ClusterReport"),
		ObjectMeta:    p.ObjectMeta,
		Source:        audit.Source,
		Scope:         p.Scope,
		ScopeSelector: p.ScopeSelector,
		Summary:       toSummary(p.Summary),
		Results:       toResults(p.Results),
	}
}

// FromReport converts a Report to a PolicyReport. The top-level source has no place there: each result
// carries its own.
func FromReport(r *openreportsv1alpha1.Report) v1alpha2.PolicyReport {
	return v1alpha2.PolicyReport{
		TypeMeta:      wgpolicyTypeMeta(r.TypeMeta, "PolicyReport"),
		ObjectMeta:    r.ObjectMeta,
		Scope:         r.Scope,
		ScopeSelector: r.ScopeSelector,
		Summary:       fromSummary(r.Summary),
		Results:       fromResults(r.Results),
	}
}

// FromClusterReport converts a ClusterReport to a ClusterPolicyReport, as FromReport does.
func FromClusterReport(r *openreportsv1alpha1.ClusterReport) v1alpha2.ClusterPolicyReport {
	return v1alpha2.ClusterPolicyReport{
		TypeMeta:      wgpolicyTypeMeta(r.TypeMeta, "ClusterPolicyReport"),
		ObjectMeta:    r.ObjectMeta,
		Scope:         r.Scope,
		ScopeSelector: r.ScopeSelector,
		Summary:       fromSummary(r.Summary),
		Results:       fromResults(r.Results),
	}
}

// openreportsTypeMeta and wgpolicyTypeMeta keep a TypeMeta set (as a decoded object has it) and leave an
// unset one unset (as the builder leaves it: the client fills it in from the scheme).
func openreportsTypeMeta(t metav1.TypeMeta, kind string) metav1.TypeMeta {
	if t.Kind == "" && t.APIVersion == "" {
		return t
	}
	return metav1.TypeMeta{APIVersion: openreportsv1alpha1.GroupVersion.String(), Kind: kind}
}

func wgpolicyTypeMeta(t metav1.TypeMeta, kind string) metav1.TypeMeta {
	if t.Kind == "" && t.APIVersion == "" {
		return t
	}
	return metav1.TypeMeta{APIVersion: v1alpha2.GroupVersion.String(), Kind: kind}
}

func toSummary(s v1alpha2.PolicyReportSummary) openreportsv1alpha1.ReportSummary {
	return openreportsv1alpha1.ReportSummary{Pass: s.Pass, Fail: s.Fail, Warn: s.Warn, Error: s.Error, Skip: s.Skip}
}

func fromSummary(s openreportsv1alpha1.ReportSummary) v1alpha2.PolicyReportSummary {
	return v1alpha2.PolicyReportSummary{Pass: s.Pass, Fail: s.Fail, Warn: s.Warn, Error: s.Error, Skip: s.Skip}
}

// toResults converts results field by field. Two fields are named differently in Go though not in JSON:
// OpenReports' Description is the JSON "message", and its Subjects are the JSON "resources".
func toResults(in []v1alpha2.PolicyReportResult) []openreportsv1alpha1.ReportResult {
	if in == nil {
		return nil
	}
	out := make([]openreportsv1alpha1.ReportResult, len(in))
	for i := range in {
		r := &in[i]
		out[i] = openreportsv1alpha1.ReportResult{
			Source:           r.Source,
			Policy:           r.Policy,
			Rule:             r.Rule,
			Category:         r.Category,
			Severity:         openreportsv1alpha1.ResultSeverity(r.Severity),
			Timestamp:        r.Timestamp,
			Result:           openreportsv1alpha1.Result(r.Result),
			Scored:           r.Scored,
			Subjects:         r.Resources,
			ResourceSelector: r.ResourceSelector,
			Description:      r.Message,
			Properties:       r.Properties,
		}
	}
	return out
}

func fromResults(in []openreportsv1alpha1.ReportResult) []v1alpha2.PolicyReportResult {
	if in == nil {
		return nil
	}
	out := make([]v1alpha2.PolicyReportResult, len(in))
	for i := range in {
		r := &in[i]
		out[i] = v1alpha2.PolicyReportResult{
			Source:           r.Source,
			Policy:           r.Policy,
			Rule:             r.Rule,
			Category:         r.Category,
			Severity:         v1alpha2.PolicyResultSeverity(r.Severity),
			Timestamp:        r.Timestamp,
			Result:           v1alpha2.PolicyResult(r.Result),
			Scored:           r.Scored,
			Resources:        r.Subjects,
			ResourceSelector: r.ResourceSelector,
			Message:          r.Description,
			Properties:       r.Properties,
		}
	}
	return out
}
