package envtestutil

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// ListFailures makes the LISTs of one resource fail, as an aggregated API that is down or a broken conversion
// webhook would: while its message is set, each LIST of Resource through a config it wrapped is answered with
// a 500 Status carrying that message. Every other request, and every request while the message is empty,
// goes to the API server.
type ListFailures struct {
	// Resource is the plural resource name whose LISTs fail, e.g. "configmaps".
	Resource string
	message  atomic.Value // string
	mu       sync.Mutex
	times    []time.Time // guarded by mu: when each failed LIST was made
}

// SetMessage sets the message of the failures; "" lets LISTs through again.
func (f *ListFailures) SetMessage(message string) { f.message.Store(message) }

// Failed returns how many LISTs were answered with a failure.
func (f *ListFailures) Failed() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.times))
}

// Times returns when each LIST answered with a failure was made, in order.
func (f *ListFailures) Times() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.times...)
}

// Wrap returns a copy of cfg whose LISTs of Resource fail while the message is set.
func (f *ListFailures) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			msg, _ := f.message.Load().(string)
			if msg == "" || req.Method != http.MethodGet || req.URL.Query().Get("watch") == "true" ||
				!strings.HasSuffix(req.URL.Path, "/"+f.Resource) {
				return rt.RoundTrip(req)
			}
			f.mu.Lock()
			f.times = append(f.times, time.Now())
			f.mu.Unlock()
			body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":"InternalError","code":500}`, msg)
			return &http.Response{
				StatusCode: http.StatusInternalServerError,
				Header:     http.Header{"Content-Type": []string{"application/json"}},
				Body:       io.NopCloser(strings.NewReader(body)),
				Request:    req,
			}, nil
		})
	})
	return cfg
}
