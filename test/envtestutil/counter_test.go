package envtestutil

import (
	"net/http"
	"net/url"
	"testing"
)

func TestVerbAndResource(t *testing.T) {
	cases := []struct {
		method, url, verb, resource, namespace, name string
	}{
		{"GET", "/api/v1/namespaces", "list", "namespaces", "", ""},
		{"GET", "/api/v1/namespaces/a", "get", "namespaces", "", "a"},
		{"GET", "/api/v1/namespaces/a/configmaps?limit=500", "list", "configmaps", "a", ""},
		{"GET", "/api/v1/configmaps?watch=true", "watch", "configmaps", "", ""},
		{"GET", "/api/v1/namespaces/a/configmaps/x", "get", "configmaps", "a", "x"},
		{"POST", "/apis/wgpolicyk8s.io/v1alpha2/namespaces/b/policyreports", "create", "policyreports", "b", ""},
		{"PUT", "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports/celaudit", "update", "clusterpolicyreports", "", "celaudit"},
		{"DELETE", "/apis/example.com/v1/namespaces/a/widgets/w", "delete", "widgets", "a", "w"},
		{"PATCH", "/apis/example.com/v1/widgets/w/status", "patch", "widgets", "", "w"},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.url, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			req := &http.Request{Method: tc.method, URL: u}
			if got := verbOf(req); got != tc.verb {
				t.Errorf("verb = %q, want %q", got, tc.verb)
			}
			if got := resourceOf(u.Path); got != tc.resource {
				t.Errorf("resource = %q, want %q", got, tc.resource)
			}
			if got := namespaceOf(u.Path); got != tc.namespace {
				t.Errorf("namespace = %q, want %q", got, tc.namespace)
			}
			if got := nameOf(u.Path); got != tc.name {
				t.Errorf("name = %q, want %q", got, tc.name)
			}
		})
	}
}

func TestStatusCounts(t *testing.T) {
	var c RequestCounter
	c.addStatus("create", "policyreports", "a", http.StatusCreated)
	c.addStatus("create", "policyreports", "a", http.StatusCreated)
	c.addStatus("create", "policyreports", "a", http.StatusConflict)
	c.addStatus("create", "policyreports", "b", http.StatusCreated)
	if got := c.StatusIn("create", "policyreports", "a", http.StatusCreated); got != 2 {
		t.Errorf("201s in a = %d, want 2", got)
	}
	if got := c.StatusIn("create", "policyreports", "a", http.StatusConflict); got != 1 {
		t.Errorf("409s in a = %d, want 1", got)
	}
	if got := c.StatusIn("create", "policyreports", "c", http.StatusCreated); got != 0 {
		t.Errorf("201s in c = %d, want 0", got)
	}
	c.Reset()
	if got := c.StatusIn("create", "policyreports", "a", http.StatusCreated); got != 0 {
		t.Errorf("after Reset, 201s in a = %d, want 0", got)
	}
}
