package envtestutil

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// RequestCounter counts the API requests made through a rest.Config, by verb and resource, so tests can
// assert how much an operation cost the API server rather than how it was coded.
type RequestCounter struct {
	mu          sync.Mutex
	counts      map[string]int
	byNamespace map[string]int // keyed "verb resource namespace", for namespaced requests
	byStatus    map[string]int // keyed "verb resource namespace status"
}

// Count is one counted request kind.
type Count struct {
	Verb     string // get, list, watch, create, update, patch, delete
	Resource string // plural resource name, e.g. policyreports
}

// Wrap returns a copy of cfg whose requests are counted.
func (c *RequestCounter) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			verb, resource, namespace := verbOf(req), resourceOf(req.URL.Path), namespaceOf(req.URL.Path)
			c.add(verb, resource, namespace)
			resp, err := rt.RoundTrip(req)
			if resp != nil {
				c.addStatus(verb, resource, namespace, resp.StatusCode)
			}
			return resp, err
		})
	})
	return cfg
}

// Get returns how many requests of verb on resource were made.
func (c *RequestCounter) Get(verb, resource string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[verb+" "+resource]
}

// GetIn returns how many requests of verb on resource in namespace were made.
func (c *RequestCounter) GetIn(verb, resource, namespace string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byNamespace[verb+" "+resource+" "+namespace]
}

// StatusIn returns how many requests of verb on resource in namespace ("" for cluster-scoped ones) were
// answered with the HTTP status code. Requests client-go retries (after a 429, say) count once per answer.
func (c *RequestCounter) StatusIn(verb, resource, namespace string, code int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byStatus[fmt.Sprintf("%s %s %s %d", verb, resource, namespace, code)]
}

// WithStatus returns the counts of the requests answered with the HTTP status code, keyed "verb resource
// namespace" (namespace "" for cluster-scoped requests): a test of an identity's access lists what it was
// refused with 403.
func (c *RequestCounter) WithStatus(code int) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	suffix := fmt.Sprintf(" %d", code)
	for k, v := range c.byStatus {
		if key, ok := strings.CutSuffix(k, suffix); ok {
			out[key] = v
		}
	}
	return out
}

// Snapshot returns all counts, keyed "verb resource".
func (c *RequestCounter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Reset forgets every count.
func (c *RequestCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = nil
	c.byNamespace = nil
	c.byStatus = nil
}

func (c *RequestCounter) addStatus(verb, resource, namespace string, code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byStatus == nil {
		c.byStatus = map[string]int{}
	}
	c.byStatus[fmt.Sprintf("%s %s %s %d", verb, resource, namespace, code)]++
}

// Writes returns the number of create, update, patch and delete requests on resource.
func (c *RequestCounter) Writes(resource string) int {
	return c.Get("create", resource) + c.Get("update", resource) + c.Get("patch", resource) + c.Get("delete", resource)
}

func (c *RequestCounter) add(verb, resource, namespace string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
		c.byNamespace = map[string]int{}
	}
	c.counts[verb+" "+resource]++
	if namespace != "" {
		c.byNamespace[verb+" "+resource+" "+namespace]++
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func verbOf(req *http.Request) string {
	q := req.URL.Query()
	switch req.Method {
	case http.MethodGet:
		if q.Get("watch") == "true" || q.Get("watch") == "1" {
			return "watch"
		}
		if isCollection(req.URL.Path) {
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(req.Method)
}

// pathParts returns the resource-relevant segments after /api/v1 or /apis/group/version, and the namespace
// of a namespaced request ("" for others).
func pathParts(path string) (parts []string, namespace string) {
	parts = strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return nil, ""
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		return parts[2:], parts[1]
	}
	return parts, ""
}

// namespaceOf returns the namespace of a namespaced request's path, "" for others.
func namespaceOf(path string) string {
	_, namespace := pathParts(path)
	return namespace
}

func resourceOf(path string) string {
	parts, _ := pathParts(path)
	if len(parts) == 0 {
		return ""
	}
	return parts[0]
}

func isCollection(path string) bool {
	parts, _ := pathParts(path)
	return len(parts) == 1
}
