package scan

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestResourcePath(t *testing.T) {
	for _, tc := range []struct {
		gvr       schema.GroupVersionResource
		namespace string
		want      string
	}{
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "", "/api/v1/configmaps"},
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ns", "/api/v1/namespaces/ns/configmaps"},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "", "/apis/apps/v1/deployments"},
		{schema.GroupVersionResource{Group: "example.com", Version: "v1beta1", Resource: "widgets"}, "a", "/apis/example.com/v1beta1/namespaces/a/widgets"},
	} {
		if got := strings.Join(resourcePath(tc.gvr, tc.namespace), "/"); got != tc.want {
			t.Errorf("resourcePath(%v, %q) = %s, want %s", tc.gvr, tc.namespace, got, tc.want)
		}
	}
}
