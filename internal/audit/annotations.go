package audit

import (
	"sort"
	"strconv"
	"strings"
	"time"
)

// Annotations on an audited CRD or ValidatingAdmissionPolicy that steer its audit. They are read by
// ParseAnnotations only.
const (
	// AnnotationPrefix starts every celaudit annotation.
	AnnotationPrefix = "celaudit.io/"
	// AnnotationCategory sets the category of the policy's results.
	AnnotationCategory = AnnotationPrefix + "category"
	// AnnotationSeverity sets the severity of the policy's results: critical, high, medium, low or info.
	AnnotationSeverity = AnnotationPrefix + "severity"
	// AnnotationRescan: any change of its value triggers a full rescan of the policy.
	AnnotationRescan = AnnotationPrefix + "rescan"
	// AnnotationResyncInterval overrides the periodic resync interval of the policy (a Go duration; 0
	// disables it).
	AnnotationResyncInterval = AnnotationPrefix + "resync-interval"
	// AnnotationExpandPodTemplates, "true" on a ValidatingAdmissionPolicy, also evaluates its validations of
	// Pods against the pod templates of workloads (Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs,
	// CronJobs): a template that breaks a Pod rule is reported on the workload, before any Pod is refused.
	AnnotationExpandPodTemplates = AnnotationPrefix + "expand-pod-templates"
)

// PolicyAnnotations are a policy object's celaudit annotations, parsed. Values that do not parse are left
// unset, so the defaults apply, exactly as if the annotation were absent.
type PolicyAnnotations struct {
	// Category of the results, trimmed; "" when unset.
	Category string
	// Severity of the results, one of the PolicyReport severities; "" when unset or not one of them.
	Severity string
	// ResyncInterval is the policy's own resync interval; set only when HasResyncInterval.
	ResyncInterval    time.Duration
	HasResyncInterval bool
	// ExpandPodTemplates says whether the policy's Pod rules are also evaluated against workloads' pod
	// templates; false when unset or not a boolean.
	ExpandPodTemplates bool
	// Signature holds every celaudit annotation in a stable form: a change of any of them (category,
	// severity, rescan, expand-pod-templates) recompiles the policy, while unrelated annotations do not.
	Signature string
}

// ParseAnnotations reads the celaudit annotations of a policy object. Category is trimmed; severity is
// trimmed and lowercased before it is checked against the PolicyReport severities; expand-pod-templates is
// trimmed and read as a Go boolean ("true", "false", "1", ...).
func ParseAnnotations(a map[string]string) PolicyAnnotations {
	var out PolicyAnnotations
	out.Category = strings.TrimSpace(a[AnnotationCategory])
	out.Severity, _ = ParseSeverity(a[AnnotationSeverity])
	if v, ok := a[AnnotationResyncInterval]; ok {
		if d, err := time.ParseDuration(strings.TrimSpace(v)); err == nil && d >= 0 {
			out.ResyncInterval, out.HasResyncInterval = d, true
		}
	}
	if b, err := strconv.ParseBool(strings.TrimSpace(a[AnnotationExpandPodTemplates])); err == nil {
		out.ExpandPodTemplates = b
	}
	var parts []string
	for k, v := range a {
		if strings.HasPrefix(k, AnnotationPrefix) {
			parts = append(parts, k+"="+v)
		}
	}
	sort.Strings(parts)
	out.Signature = strings.Join(parts, "\n")
	return out
}

// ResyncOr returns the policy's own resync interval, or def when it has none.
func (a PolicyAnnotations) ResyncOr(def time.Duration) time.Duration {
	if a.HasResyncInterval {
		return a.ResyncInterval
	}
	return def
}

// CategoryOr returns the policy's category, or def when it has none.
func (a PolicyAnnotations) CategoryOr(def string) string {
	if a.Category != "" {
		return a.Category
	}
	return def
}

// SeverityOr returns the policy's severity, or def when it has none.
func (a PolicyAnnotations) SeverityOr(def string) string {
	if a.Severity != "" {
		return a.Severity
	}
	return def
}

// ParseSeverity returns s as a PolicyReport severity (trimmed, lowercased) and whether it is one.
func ParseSeverity(s string) (string, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case SeverityCritical, SeverityHigh, SeverityMedium, SeverityLow, SeverityInfo:
		return s, true
	}
	return "", false
}
