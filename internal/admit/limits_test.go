package admit

import (
	"encoding/base64"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestRequestTooLarge(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{
		{n: 3 << 20, want: ""},
		{n: 3<<20 + 1, want: "Request entity too large: limit is 3145728"},
	} {
		got := ""
		if err := RequestTooLarge(tc.n); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("RequestTooLarge(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestDataTooLong(t *testing.T) {
	fill := func(n int) string { return strings.Repeat("x", n) }
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString([]byte(fill(n))) }
	object := func(kind string, fields map[string]any) *unstructured.Unstructured {
		obj := map[string]any{"apiVersion": "v1", "kind": kind, "metadata": map[string]any{"name": "o"}}
		for k, v := range fields {
			obj[k] = v
		}
		return &unstructured.Unstructured{Object: obj}
	}
	const (
		configMapTooLong = "[]: Too long: may not be more than 1048576 bytes"
		secretTooLong    = "data: Too long: may not be more than 1048576 bytes"
	)
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want string
		size int
	}{
		{name: "ConfigMap at the limit", obj: object("ConfigMap", map[string]any{"data": map[string]any{"a": fill(1 << 19), "b": fill(1 << 19)}}), size: 1 << 20},
		{name: "ConfigMap over the limit", obj: object("ConfigMap", map[string]any{"data": map[string]any{"a": fill(1<<20 + 1)}}), want: configMapTooLong, size: 1<<20 + 1},
		{name: "ConfigMap binaryData counted decoded", obj: object("ConfigMap", map[string]any{
			"data": map[string]any{"a": fill(1 << 19)}, "binaryData": map[string]any{"b": b64(1<<19 + 2)},
		}), want: configMapTooLong, size: 1<<20 + 2},
		{name: "ConfigMap binaryData at the limit", obj: object("ConfigMap", map[string]any{"binaryData": map[string]any{"b": b64(1 << 20)}}), size: 1 << 20},
		{name: "Secret data counted decoded", obj: object("Secret", map[string]any{"data": map[string]any{"a": b64(1<<20 + 1)}}), want: secretTooLong, size: 1<<20 + 1},
		{name: "Secret stringData adds to data", obj: object("Secret", map[string]any{
			"data": map[string]any{"a": b64(1 << 20)}, "stringData": map[string]any{"b": "x"},
		}), want: secretTooLong, size: 1<<20 + 1},
		{name: "Secret stringData replaces the key of data", obj: object("Secret", map[string]any{
			"data": map[string]any{"a": b64(1<<20 + 1)}, "stringData": map[string]any{"a": "xy"},
		}), size: 2},
		{name: "other kinds have no data limit", obj: object("Pod", map[string]any{"data": map[string]any{"a": fill(1<<20 + 1)}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err, size := DataTooLong(tc.obj)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want || size != tc.size {
				t.Errorf("DataTooLong = %q, %d; want %q, %d", got, size, tc.want, tc.size)
			}
		})
	}
}
