package report

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
)

// stored returns reports as the API server returns them: with a resourceVersion and a uid, without
// TypeMeta (as typed clients decode lists), and with empty slices where BuildCounted leaves nil.
func stored(r Reports) Reports {
	var out Reports
	for _, p := range r.PolicyReports {
		p := *p.DeepCopy()
		p.TypeMeta = metav1.TypeMeta{}
		p.ResourceVersion, p.UID = "7", types.UID("uid-"+p.Name)
		if p.Results == nil {
			p.Results = []v1alpha2.PolicyReportResult{}
		}
		out.PolicyReports = append(out.PolicyReports, p)
	}
	for _, p := range r.ClusterPolicyReports {
		p := *p.DeepCopy()
		p.TypeMeta = metav1.TypeMeta{}
		p.ResourceVersion, p.UID = "7", types.UID("uid-"+p.Name)
		out.ClusterPolicyReports = append(out.ClusterPolicyReports, p)
	}
	return out
}

type changeNames struct{ create, update, delete []string }

func namesOf[T any](c ObjectChanges[T], meta func(*T) *metav1.ObjectMeta) changeNames {
	list := func(items []T) []string {
		var out []string
		for i := range items {
			m := meta(&items[i])
			out = append(out, m.Namespace+"/"+m.Name)
		}
		return out
	}
	return changeNames{list(c.Create), list(c.Update), list(c.Delete)}
}

func policyMeta(r *v1alpha2.PolicyReport) *metav1.ObjectMeta         { return &r.ObjectMeta }
func clusterMeta(r *v1alpha2.ClusterPolicyReport) *metav1.ObjectMeta { return &r.ObjectMeta }

func TestDiff(t *testing.T) {
	results := []audit.Result{
		newResult(withObject("team-a", "w1")),
		newResult(withObject("team-b", "w1")),
		newResult(withObject("", "global")),
	}
	desired := BuildCounted(results, nil, nil, scanTime(), Options{})
	current := stored(desired)

	tests := []struct {
		name        string
		desired     Reports
		existing    Reports
		wantPolicy  changeNames
		wantCluster changeNames
	}{
		{
			name:        "nothing published yet: create all",
			desired:     desired,
			wantPolicy:  changeNames{create: []string{"team-a/celaudit", "team-b/celaudit"}},
			wantCluster: changeNames{create: []string{"/celaudit"}},
		},
		{
			name:     "unchanged: no writes",
			desired:  desired,
			existing: current,
		},
		{
			name:       "a result changed: update that report only",
			desired:    BuildCounted(append(slices.Clone(results), newResult(withObject("team-b", "w2"))), nil, nil, scanTime(), Options{}),
			existing:   current,
			wantPolicy: changeNames{update: []string{"team-b/celaudit"}},
		},
		{
			name:       "a namespace without results any more: delete its report",
			desired:    BuildCounted(results[1:], nil, nil, scanTime(), Options{}),
			existing:   current,
			wantPolicy: changeNames{delete: []string{"team-a/celaudit"}},
		},
		{
			name:        "no results at all: delete every managed report",
			desired:     Reports{},
			existing:    current,
			wantPolicy:  changeNames{delete: []string{"team-a/celaudit", "team-b/celaudit"}},
			wantCluster: changeNames{delete: []string{"/celaudit"}},
		},
		{
			name:    "an emptied chunk is deleted",
			desired: desired,
			existing: func() Reports {
				r := stored(desired)
				extra := *r.ClusterPolicyReports[0].DeepCopy()
				extra.Name = ChunkName(1)
				r.ClusterPolicyReports = append(r.ClusterPolicyReports, extra)
				return r
			}(),
			wantCluster: changeNames{delete: []string{"/celaudit-1"}},
		},
		{
			name:    "reports of other tools are left alone",
			desired: desired,
			existing: func() Reports {
				r := stored(desired)
				r.PolicyReports = append(r.PolicyReports, v1alpha2.PolicyReport{
					ObjectMeta: metav1.ObjectMeta{Name: "polr-ns-team-a", Namespace: "team-a", Labels: map[string]string{ManagedByLabel: "kyverno"}},
				})
				return r
			}(),
		},
		{
			name:    "our label removed: no longer ours, left alone",
			desired: desired,
			existing: func() Reports {
				r := stored(desired)
				r.PolicyReports[0].Labels = nil
				r.PolicyReports[0].Results = nil
				return r
			}(),
		},
		{
			name:    "labels added by others: no write",
			desired: desired,
			existing: func() Reports {
				r := stored(desired)
				r.PolicyReports[0].Labels["team"] = "a"
				return r
			}(),
		},
		{
			name:    "scope set by hand: reverted",
			desired: desired,
			existing: func() Reports {
				r := stored(desired)
				r.ClusterPolicyReports[0].Scope = &corev1.ObjectReference{Kind: "Namespace", Name: "x"}
				return r
			}(),
			wantCluster: changeNames{update: []string{"/celaudit"}},
		},
	}
	for _, tt := range tests {
		for _, compacted := range []bool{false, true} {
			name := tt.name
			existing := tt.existing
			if compacted {
				// As the operator's cache holds them: compared by digest.
				name += " (cached)"
				existing = cached(t, existing)
			}
			t.Run(name, func(t *testing.T) {
				got := Diff(tt.desired, existing)
				if p := namesOf(got.PolicyReports, policyMeta); !equalNames(p, tt.wantPolicy) {
					t.Errorf("policy reports: %+v, want %+v", p, tt.wantPolicy)
				}
				if c := namesOf(got.ClusterPolicyReports, clusterMeta); !equalNames(c, tt.wantCluster) {
					t.Errorf("cluster policy reports: %+v, want %+v", c, tt.wantCluster)
				}
				wantEmpty := equalNames(tt.wantPolicy, changeNames{}) && equalNames(tt.wantCluster, changeNames{})
				if got.Empty() != wantEmpty {
					t.Errorf("Empty() = %v, want %v", got.Empty(), wantEmpty)
				}
				for _, u := range got.PolicyReports.Update {
					noCacheAnnotations(t, &u.ObjectMeta)
				}
				for _, u := range got.ClusterPolicyReports.Update {
					noCacheAnnotations(t, &u.ObjectMeta)
				}
			})
		}
	}
}

// noCacheAnnotations fails t when an update carries an annotation of the operator's cache.
func noCacheAnnotations(t *testing.T, meta *metav1.ObjectMeta) {
	t.Helper()
	for _, a := range []string{ContentDigestAnnotation, ResultTimestampsAnnotation} {
		if _, ok := meta.Annotations[a]; ok {
			t.Errorf("update of %s carries the cache's annotation %s", meta.Name, a)
		}
	}
}

// cached returns reports as ForCache leaves them in the operator's cache.
func cached(t *testing.T, r Reports) Reports {
	t.Helper()
	var out Reports
	for i := range r.PolicyReports {
		c, err := ForCache(r.PolicyReports[i].DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		out.PolicyReports = append(out.PolicyReports, *c.(*v1alpha2.PolicyReport))
	}
	for i := range r.ClusterPolicyReports {
		c, err := ForCache(r.ClusterPolicyReports[i].DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		out.ClusterPolicyReports = append(out.ClusterPolicyReports, *c.(*v1alpha2.ClusterPolicyReport))
	}
	return out
}

func equalNames(a, b changeNames) bool {
	return slices.Equal(a.create, b.create) && slices.Equal(a.update, b.update) && slices.Equal(a.delete, b.delete)
}

func TestDiffUpdateCarriesExistingMetadata(t *testing.T) {
	before := BuildCounted([]audit.Result{newResult()}, nil, nil, scanTime(), Options{})
	existing := stored(before)
	existing.PolicyReports[0].Labels["team"] = "a"
	existing.PolicyReports[0].Annotations = map[string]string{"note": "kept"}

	desired := BuildCounted([]audit.Result{newResult(), newResult(withObject("team-a", "w2"))}, nil, nil, scanTime(), Options{})
	got := Diff(desired, existing).PolicyReports.Update
	if len(got) != 1 {
		t.Fatalf("got %d updates, want 1", len(got))
	}
	u := got[0]
	if u.ResourceVersion != "7" || u.UID != "uid-celaudit" {
		t.Errorf("update lost the existing identity: resourceVersion %q uid %q", u.ResourceVersion, u.UID)
	}
	if u.Labels["team"] != "a" || !IsManaged(&u) || u.Annotations["note"] != "kept" {
		t.Errorf("update metadata: labels %v annotations %v", u.Labels, u.Annotations)
	}
	if u.Summary != desired.PolicyReports[0].Summary || len(u.Results) != 2 {
		t.Errorf("update content: summary %+v with %d results", u.Summary, len(u.Results))
	}
	if u.Kind != "PolicyReport" {
		t.Errorf("update kind %q, want PolicyReport", u.Kind)
	}

	// Writing the changes (which sets resourceVersions and the like) leaves the existing reports alone;
	// desired is Diff's to share.
	u.Results[0].Message = "changed"
	u.Labels["written"] = "yes"
	u.Annotations["note"] = "rewritten"
	if existing.PolicyReports[0].Labels["written"] != "" || existing.PolicyReports[0].Annotations["note"] != "kept" {
		t.Error("Diff returned metadata shared with the existing reports")
	}
}

// The reconciler hands Diff, PreviousTimestamps and ChunkCounts the reports its cache holds, without copying
// them: none of them may modify what they read, whatever the changes.
func TestExistingReportsAreReadOnly(t *testing.T) {
	old := BuildCounted([]audit.Result{
		newResult(withObject("team-a", "w1")),
		newResult(withObject("team-a", "w2")),
		newResult(withObject("", "global")),
	}, nil, nil, scanTime(), Options{MaxResultsPerReport: 1})
	existing := stored(old)
	existing.PolicyReports[0].Labels["team"] = "a" // a label someone else set
	before := Reports{
		PolicyReports:        slices.Clone(existing.PolicyReports),
		ClusterPolicyReports: slices.Clone(existing.ClusterPolicyReports),
	}
	for i := range before.PolicyReports {
		before.PolicyReports[i] = *existing.PolicyReports[i].DeepCopy()
	}
	for i := range before.ClusterPolicyReports {
		before.ClusterPolicyReports[i] = *existing.ClusterPolicyReports[i].DeepCopy()
	}
	desired := BuildCounted([]audit.Result{newResult(withObject("team-a", "w1"))}, nil, PreviousTimestamps(existing), scanTime(), Options{
		MaxResultsPerReport: 1,
		Chunks:              ChunkCounts(existing),
	})
	changes := Diff(desired, existing)
	if changes.Empty() {
		t.Fatal("expected changes: the test must exercise updates and deletes")
	}
	for i := range changes.PolicyReports.Update {
		changes.PolicyReports.Update[i].Labels["touched"] = "yes"
		changes.PolicyReports.Update[i].Results = nil
	}
	for i := range changes.PolicyReports.Delete {
		changes.PolicyReports.Delete[i].Labels["touched"] = "yes"
	}
	for i := range changes.ClusterPolicyReports.Delete {
		changes.ClusterPolicyReports.Delete[i].Labels["touched"] = "yes"
	}
	if !equality.Semantic.DeepEqual(before, existing) {
		t.Fatal("existing reports were modified")
	}
}

// A sharded member's annotations are on every report it builds, and a report whose values of them differ is
// updated, results unchanged, keeping what others annotated; one that holds them is not written again,
// compacted by the cache or not.
func TestDiffEnforcesAnnotations(t *testing.T) {
	results := []audit.Result{newResult()}
	epoch := func(e string) Options {
		return Options{Annotations: map[string]string{"celaudit.io/shard-epoch": e, "celaudit.io/shard": "1/3"}}
	}
	unsharded := stored(BuildCounted(results, nil, nil, scanTime(), Options{}))
	unsharded.PolicyReports[0].Annotations = map[string]string{"note": "kept"}
	atEpoch2 := stored(BuildCounted(results, nil, nil, scanTime(), epoch("2")))
	compacted := stored(BuildCounted(results, nil, nil, scanTime(), epoch("2")))
	for i := range compacted.PolicyReports {
		if _, err := ForCache(&compacted.PolicyReports[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		existing Reports
		opts     Options
		// want are the annotations of the one update; nil: no write.
		want map[string]string
	}{
		{"unsharded report, sharded member", unsharded, epoch("2"),
			map[string]string{"note": "kept", "celaudit.io/shard-epoch": "2", "celaudit.io/shard": "1/3"}},
		{"lower epoch", atEpoch2, epoch("3"), map[string]string{"celaudit.io/shard-epoch": "3", "celaudit.io/shard": "1/3"}},
		{"same epoch", atEpoch2, epoch("2"), nil},
		{"same epoch, compacted", compacted, epoch("2"), nil},
		{"unsharded member keeps others' annotations", unsharded, Options{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			desired := BuildCounted(results, nil, nil, scanTime(), tc.opts)
			c := Diff(desired, tc.existing)
			if len(c.PolicyReports.Create)+len(c.PolicyReports.Delete) != 0 {
				t.Fatalf("changes %+v, want at most an update", namesOf(c.PolicyReports, policyMeta))
			}
			switch u := c.PolicyReports.Update; {
			case tc.want == nil && len(u) != 0:
				t.Fatalf("updated with annotations %v, want no write", u[0].Annotations)
			case tc.want != nil && len(u) != 1:
				t.Fatalf("%d updates, want 1", len(u))
			case tc.want != nil && !equality.Semantic.DeepEqual(u[0].Annotations, tc.want):
				t.Fatalf("update annotations %v, want %v", u[0].Annotations, tc.want)
			}
		})
	}
}
