package views_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/celaudit/celaudit/internal/views"
)

// TestOverlayParams checks that proposed param objects replace the base's of the same kind, namespace and
// name, and are listed beside the others, in namespace/name order.
func TestOverlayParams(t *testing.T) {
	base := views.NewFileParams(paramFixtures())
	params := views.NewOverlayParams(base, []*unstructured.Unstructured{
		newConfigMap("a", "limits", withLabels("tier", "silver"), withField("data.max", "9")), // leaves gold
		newConfigMap("c", "limits", withLabels("tier", "gold")),                               // new
	})
	gold := labels.SelectorFromSet(labels.Set{"tier": "gold"})
	for _, c := range []struct {
		name      string
		namespace string
		selector  labels.Selector
		want      string
	}{
		{"gold everywhere", "", gold, "a-b/limits b/limits c/limits"},
		{"everything in a", "a", nil, "a/limits a/other"},
		{"gold in a: the proposal moved it", "a", gold, ""},
		{"gold in c: the proposal added it", "c", gold, "c/limits"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := keys(params.List(configMapKind, c.namespace, c.selector)); got != c.want {
				t.Errorf("List = %q, want %q", got, c.want)
			}
		})
	}
	got, err := params.Get(configMapKind, "a", "limits")
	if err != nil {
		t.Fatal(err)
	}
	if max, _, _ := unstructured.NestedString(got.(*unstructured.Unstructured).Object, "data", "max"); max != "9" {
		t.Errorf("Get a/limits: data.max %q, want the proposal's 9", max)
	}
	if got, err := params.Get(configMapKind, "b", "limits"); err != nil || got.(*unstructured.Unstructured).GetNamespace() != "b" {
		t.Errorf("Get b/limits: %v, %v; want the base's", got, err)
	}
}
