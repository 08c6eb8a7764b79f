package envtestutil

import (
	"net/http"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Request is one API request made through a config a RequestLog wrapped.
type Request struct {
	Verb      string // get, list, watch, create, update, patch, delete
	Resource  string // plural resource name, e.g. policyreports
	Namespace string // "" for cluster-scoped requests
	// Name is the object's: "" for a create (whose name is in its body) and for collections.
	Name string
	// Query holds the request's query parameters: limit, continue, resourceVersion, watch, ...
	Query url.Values
	// Sent is when the request left for the API server, after Hold; Answered when its answer came back.
	Sent, Answered time.Time
	// Status is the HTTP status of the answer, 0 when none came.
	Status int
}

// DescribeRequest returns what req does: its verb, resource, namespace, name and query. The recording
// proxies of the replica tests classify what each replica sent with it too.
func DescribeRequest(req *http.Request) Request {
	return Request{Verb: verbOf(req), Resource: resourceOf(req.URL.Path), Namespace: namespaceOf(req.URL.Path), Name: nameOf(req.URL.Path),
		Query: req.URL.Query()}
}

// RequestLog records the API requests made through a rest.Config, with when they were sent and answered, and
// can hold some back or act before they are sent: a test sees in which order writes reached the API server,
// makes one slow to see what waits for it, or changes the cluster between a client's read and its write.
type RequestLog struct {
	// Hold, when set, returns how long to hold a request before it is sent.
	Hold func(Request) time.Duration
	// Before, when set, is called with each request just before it is sent.
	Before func(Request)

	mu       sync.Mutex
	requests []Request
}

// Wrap returns a copy of cfg whose requests are recorded, held and preceded as l says.
func (l *RequestLog) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			r := DescribeRequest(req)
			if l.Hold != nil {
				if d := l.Hold(r); d > 0 {
					select {
					case <-time.After(d):
					case <-req.Context().Done():
					}
				}
			}
			if l.Before != nil {
				l.Before(r)
			}
			r.Sent = time.Now()
			resp, err := rt.RoundTrip(req)
			r.Answered = time.Now()
			if resp != nil {
				r.Status = resp.StatusCode
			}
			l.mu.Lock()
			l.requests = append(l.requests, r)
			l.mu.Unlock()
			return resp, err
		})
	})
	return cfg
}

// Requests returns the requests answered (or failed) so far, in that order, that match.
func (l *RequestLog) Requests(match func(Request) bool) []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Request
	for _, r := range l.requests {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// nameOf returns the object name of a request's path, "" for a collection.
func nameOf(path string) string {
	parts, _ := pathParts(path)
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}
