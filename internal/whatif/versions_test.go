package whatif

import (
	"cmp"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/internal/crdrules"
)

func widgets(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "example.com", Version: version, Resource: "widgets"}
}

// readCRD reads testdata/versions/name, nil for "".
func readCRD(t *testing.T, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	if name == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join("testdata", "versions", name))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

func TestPlanReads(t *testing.T) {
	const (
		webhookNote = "CustomResourceDefinition widgets.example.com: the stored objects were not evaluated in version v2, which the " +
			"proposal serves: the cluster does not serve it yet, and the CRD converts objects through a webhook, which whatif does not call"
		stopNote = "CustomResourceDefinition widgets.example.com: the proposal stops serving version v1, which objects are stored in " +
			"(status.storedVersions v1): clients reading or writing example.com/v1 will get NotFound; "
	)
	stored := map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns"},
		"spec":     map[string]any{"replicas": int64(4), "legacy": "x"},
	}
	for _, c := range []struct {
		name           string
		proposed, live string // files of testdata/versions; live "" for a CRD the cluster does not have
		served         []schema.GroupVersionResource
		// want maps each resource read to the resource listed for it.
		want map[schema.GroupVersionResource]schema.GroupVersionResource
		// converted is the stored object read in v2, nil when v2 is not read through a conversion.
		converted map[string]any
		notes     []string
	}{{
		name:     "a version added beside v1 is read through v1, converted and pruned by its schema",
		proposed: "add-v2.yaml", live: "live.yaml", served: []schema.GroupVersionResource{widgets("v1")},
		want: map[schema.GroupVersionResource]schema.GroupVersionResource{widgets("v1"): widgets("v1"), widgets("v2"): widgets("v1")},
		converted: map[string]any{
			"apiVersion": "example.com/v2", "kind": "Widget",
			"metadata": map[string]any{"name": "w", "namespace": "ns"},
			"spec":     map[string]any{"replicas": int64(4)},
		},
	}, {
		name:     "a version the cluster serves already is read as listed",
		proposed: "add-v2.yaml", live: "live.yaml", served: []schema.GroupVersionResource{widgets("v1"), widgets("v2")},
		want: map[schema.GroupVersionResource]schema.GroupVersionResource{widgets("v1"): widgets("v1"), widgets("v2"): widgets("v2")},
	}, {
		name:     "a version converted by a webhook is not read",
		proposed: "add-v2-webhook.yaml", live: "live.yaml", served: []schema.GroupVersionResource{widgets("v1")},
		want:  map[schema.GroupVersionResource]schema.GroupVersionResource{widgets("v1"): widgets("v1")},
		notes: []string{webhookNote},
	}, {
		name:     "the version objects are stored in is no longer served",
		proposed: "stop-v1.yaml", live: "live.yaml", served: []schema.GroupVersionResource{widgets("v1")},
		want: map[schema.GroupVersionResource]schema.GroupVersionResource{widgets("v1"): widgets("v1"), widgets("v2"): widgets("v1")},
		converted: map[string]any{
			"apiVersion": "example.com/v2", "kind": "Widget",
			"metadata": map[string]any{"name": "w", "namespace": "ns"},
			"spec":     map[string]any{"replicas": int64(4), "legacy": "x"},
		},
		notes: []string{stopNote + "they are evaluated in the versions it still serves, v2"},
	}, {
		name:     "no version served",
		proposed: "serve-none.yaml", live: "live.yaml", served: []schema.GroupVersionResource{widgets("v1")},
		want:  map[schema.GroupVersionResource]schema.GroupVersionResource{widgets("v1"): widgets("v1")},
		notes: []string{stopNote + "it serves no version: the objects can no longer be read at all"},
	}, {
		name:     "a new CRD has no stored objects to read",
		proposed: "add-v2.yaml",
		want:     map[schema.GroupVersionResource]schema.GroupVersionResource{},
	}} {
		t.Run(c.name, func(t *testing.T) {
			proposed, live := readCRD(t, c.proposed), readCRD(t, c.live)
			pair := &Pair{crd: crdRevision{proposed: proposed, live: live}}
			// The resources Run reads: those the CRD's policies cover today and under the proposal.
			resources := crdrules.Compile(proposed, crdrules.Options{}).Resources()
			if live != nil {
				resources = append(resources, crdrules.Compile(live, crdrules.Options{}).Resources()...)
			}
			slices.SortFunc(resources, func(a, b schema.GroupVersionResource) int { return cmp.Compare(a.String(), b.String()) })
			resources = slices.Compact(resources)

			reads, notes := planReads([]*Pair{pair}, resources, func(gvr schema.GroupVersionResource) bool { return slices.Contains(c.served, gvr) })
			from := map[schema.GroupVersionResource]schema.GroupVersionResource{}
			for gvr, r := range reads {
				from[gvr] = r.from
			}
			if !reflect.DeepEqual(from, c.want) {
				t.Errorf("reads: got %v, want %v", from, c.want)
			}
			if !slices.Equal(notes, c.notes) {
				t.Errorf("notes:\n got %q\nwant %q", notes, c.notes)
			}
			convert := reads[widgets("v2")].convert
			if (convert != nil) != (c.converted != nil) {
				t.Fatalf("v2 read through a conversion: %t, want %t", convert != nil, c.converted != nil)
			}
			if convert == nil {
				return
			}
			in := &unstructured.Unstructured{Object: runtimeCopy(stored)}
			got, err := convert(in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Object, c.converted) {
				t.Errorf("converted:\n got %v\nwant %v", got.Object, c.converted)
			}
		})
	}
}

func runtimeCopy(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}
