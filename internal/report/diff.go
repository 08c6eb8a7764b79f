package report

import (
	"cmp"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
)

// ObjectChanges lists the writes of one kind of report, each list sorted by namespace and name.
type ObjectChanges[T any] struct {
	// Create holds desired reports that do not exist yet.
	Create []T
	// Update holds existing reports whose content differs from the desired one: the existing object
	// (metadata, resourceVersion included) carrying the desired labels, scope, summary and results.
	Update []T
	// Delete holds existing reports celaudit owns that are no longer desired.
	Delete []T
}

// Changes lists the writes that turn the existing reports into the desired ones.
type Changes struct {
	PolicyReports        ObjectChanges[v1alpha2.PolicyReport]
	ClusterPolicyReports ObjectChanges[v1alpha2.ClusterPolicyReport]
}

// Empty reports whether there is nothing to write.
func (c Changes) Empty() bool {
	return c.PolicyReports.empty() && c.ClusterPolicyReports.empty()
}

func (c ObjectChanges[T]) empty() bool {
	return len(c.Create) == 0 && len(c.Update) == 0 && len(c.Delete) == 0
}

// Diff compares the desired reports (from BuildCounted) with the existing ones (read from the cluster) and
// returns what to create, update and delete. An existing report is updated only when its labels, scope,
// scope selector, summary or results differ semantically from the desired ones, so an unchanged audit
// writes nothing; reports compacted by ForCache are compared by their content digest. Existing reports not
// owned by celaudit (a report of another tool, or one whose label someone removed) are never updated or
// deleted: a desired report whose name one of them holds is not written at all. BuildCounted avoids such
// names when Options.Taken holds them (see TakenNames).
//
// Labels set by others on existing reports are kept; only celaudit's own labels are enforced.
//
// Diff takes desired over: creates and updates share its content (a namespace's reports add up to megabytes
// when it has thousands of violations, and a reconcile builds them only to write them), so the caller must
// not use desired afterwards. Existing reports are only read; what Diff returns of them is copied.
func Diff(desired, existing Reports) Changes {
	return Changes{
		PolicyReports: diffObjects(desired.PolicyReports, existing.PolicyReports, kindOps[v1alpha2.PolicyReport]{
			meta:     func(r *v1alpha2.PolicyReport) *metav1.ObjectMeta { return &r.ObjectMeta },
			deepCopy: (*v1alpha2.PolicyReport).DeepCopy,
			content:  policyContent,
		}),
		ClusterPolicyReports: diffObjects(desired.ClusterPolicyReports, existing.ClusterPolicyReports, kindOps[v1alpha2.ClusterPolicyReport]{
			meta:     func(r *v1alpha2.ClusterPolicyReport) *metav1.ObjectMeta { return &r.ObjectMeta },
			deepCopy: (*v1alpha2.ClusterPolicyReport).DeepCopy,
			content:  clusterContent,
		}),
	}
}

// content is what both report kinds hold besides their metadata. Its JSON form is the reports' own.
type content struct {
	Scope         *corev1.ObjectReference       `json:"scope,omitempty"`
	ScopeSelector *metav1.LabelSelector         `json:"scopeSelector,omitempty"`
	Summary       v1alpha2.PolicyReportSummary  `json:"summary"`
	Results       []v1alpha2.PolicyReportResult `json:"results,omitempty"`
}

func policyContent(r *v1alpha2.PolicyReport) content {
	return content{r.Scope, r.ScopeSelector, r.Summary, r.Results}
}

func clusterContent(r *v1alpha2.ClusterPolicyReport) content {
	return content{r.Scope, r.ScopeSelector, r.Summary, r.Results}
}

// sameContent reports whether an existing report (its metadata and content) holds the desired content: by
// the digest ForCache left on it, or else semantically. The summary is compared first: it is cheap and
// differs whenever the set of results changes.
func sameContent(haveMeta *metav1.ObjectMeta, have, want content) bool {
	if d, ok := cachedDigest(haveMeta); ok {
		return d == want.digest()
	}
	return have.Summary == want.Summary &&
		equality.Semantic.DeepEqual(have.Scope, want.Scope) &&
		equality.Semantic.DeepEqual(have.ScopeSelector, want.ScopeSelector) &&
		equality.Semantic.DeepEqual(have.Results, want.Results)
}

// kindOps gives diffObjects access to what it needs of one report kind.
type kindOps[T any] struct {
	meta     func(*T) *metav1.ObjectMeta
	deepCopy func(*T) *T
	content  func(*T) content
}

type objectKey struct{ namespace, name string }

func keyOf(m *metav1.ObjectMeta) objectKey { return objectKey{m.Namespace, m.Name} }

func compareKeys(a, b objectKey) int {
	return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
}

func diffObjects[T any](desired, existing []T, ops kindOps[T]) ObjectChanges[T] {
	current := make(map[objectKey]*T, len(existing))
	for i := range existing {
		current[keyOf(ops.meta(&existing[i]))] = &existing[i]
	}
	wanted := make(map[objectKey]bool, len(desired))

	var out ObjectChanges[T]
	for i := range desired {
		want := &desired[i]
		key := keyOf(ops.meta(want))
		wanted[key] = true
		have, ok := current[key]
		if !ok {
			out.Create = append(out.Create, *want)
			continue
		}
		if !IsManaged(ops.meta(have)) {
			continue // not ours to write
		}
		labels := mergeLabels(ops.meta(have).Labels, ops.meta(want).Labels)
		if equality.Semantic.DeepEqual(labels, ops.meta(have).Labels) && holds(ops.meta(have).Annotations, ops.meta(want).Annotations) &&
			sameContent(ops.meta(have), ops.content(have), ops.content(want)) {
			continue
		}
		// Start from the desired object for the content and take the existing metadata, so the update
		// carries the resourceVersion and keeps what others wrote there.
		updated := *want
		meta := ops.meta(have).DeepCopy()
		meta.Labels = labels
		if len(ops.meta(want).Annotations) > 0 {
			meta.Annotations = mergeLabels(meta.Annotations, ops.meta(want).Annotations)
		}
		for _, a := range cacheAnnotations { // the cache's, not the cluster's
			delete(meta.Annotations, a)
		}
		if len(meta.Annotations) == 0 {
			meta.Annotations = nil
		}
		*ops.meta(&updated) = *meta
		out.Update = append(out.Update, updated)
	}
	for i := range existing {
		have := &existing[i]
		m := ops.meta(have)
		if !wanted[keyOf(m)] && IsManaged(m) {
			out.Delete = append(out.Delete, *ops.deepCopy(have))
		}
	}

	byKey := func(a, b T) int { return compareKeys(keyOf(ops.meta(&a)), keyOf(ops.meta(&b))) }
	slices.SortFunc(out.Create, byKey)
	slices.SortFunc(out.Update, byKey)
	slices.SortFunc(out.Delete, byKey)
	return out
}

// mergeLabels returns a copy of have overlaid with want: celaudit's labels win, others' are kept.
// holds reports whether have holds every key of want with its value.
func holds(have, want map[string]string) bool {
	for k, v := range want {
		if w, ok := have[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func mergeLabels(have, want map[string]string) map[string]string {
	merged := maps.Clone(have)
	if merged == nil {
		merged = make(map[string]string, len(want))
	}
	maps.Copy(merged, want)
	return merged
}
