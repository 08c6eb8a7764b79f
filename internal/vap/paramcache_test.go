package vap

import (
	"testing"

	celtypes "github.com/google/cel-go/common/types"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/cel/common"
)

func unstructuredParam(uid, rv string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "bench.celaudit.io/v1",
		"kind":       "Limits",
		"metadata":   map[string]any{"name": "limits", "namespace": "n"},
		"spec":       spec,
	}}
	u.SetUID(types.UID(uid))
	u.SetResourceVersion(rv)
	return u
}

// A converted param gives CEL the same value as the apiserver's conversion of the param itself, including
// the number types its JSON round trip produces.
func TestConvertedParamMatchesUpstreamConversion(t *testing.T) {
	spec := map[string]any{
		"max":     int64(3),
		"ratio":   0.5,
		"whole":   float64(2), // a float that is a whole number comes back from JSON as an integer
		"big":     int64(1) << 60,
		"names":   []any{"a", "b"},
		"nested":  map[string]any{"on": true, "off": nil},
		"unicode": "é\u2028",
	}
	u := unstructuredParam("u1", "7", spec)
	var c paramCache
	got := common.SchemalessTypedToVal(c.of(u))
	want := common.SchemalessTypedToVal(u)
	if celtypes.IsError(want) || got.Equal(want) != celtypes.True {
		t.Fatalf("converted param %v, want %v", got, want)
	}
	if _, ok := c.of(u).(*convertedParam); !ok {
		t.Fatal("a param with a UID and resourceVersion was not cached")
	}
}

func TestParamCacheFollowsVersions(t *testing.T) {
	var c paramCache
	v1 := unstructuredParam("u1", "7", map[string]any{"max": int64(3)})
	first := c.of(v1)
	if c.of(v1) != first {
		t.Fatal("the same param version was converted twice")
	}
	v2 := unstructuredParam("u1", "8", map[string]any{"max": int64(4)})
	second := c.of(v2)
	if second == first {
		t.Fatal("a new param version got the old conversion")
	}
	if got := common.SchemalessTypedToVal(second); got.Equal(common.SchemalessTypedToVal(v2)) != celtypes.True {
		t.Fatalf("new version converted to %v", got)
	}
	if p := c.of(unstructuredParam("u2", "", nil)); p == nil {
		t.Fatal("nil for a param without resourceVersion")
	} else if _, cached := p.(*convertedParam); cached {
		t.Fatal("a param without resourceVersion was cached")
	}
	for i := range maxConvertedParams + 10 {
		c.of(unstructuredParam("many", string(rune('a'+i%26))+string(rune(i)), nil))
	}
	if n := len(c.byRV); n > maxConvertedParams {
		t.Fatalf("cache holds %d params, bound is %d", n, maxConvertedParams)
	}
}
