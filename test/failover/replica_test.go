package failover

import (
	"bytes"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/celaudit/celaudit/test/envtestutil"
)

// Leader election timing of the replicas: short, so that a failover takes seconds.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// binary is the operator built once for the package's tests.
var binary string

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "celaudit-failover")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "celaudit")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Dir = envtestutil.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building celaudit: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// call is one request a replica made, as its proxy saw it.
type call struct {
	Verb      string // get, list, watch, create, update, patch, delete
	Resource  string // plural resource name; "" for discovery and other non-resource paths
	Namespace string
	Name      string
	Path      string
	// Holder is, for a write of a Lease, the holderIdentity it sets ("" releases the lease).
	Holder string
	// Sent is when the proxy sent the request on to the API server, Answered when the answer came back.
	Sent, Answered time.Time
	Status         int // 0 when no answer came
}

// ok reports whether the API server accepted the request.
func (c call) ok() bool { return c.Status >= 200 && c.Status < 300 }

// leaseWrite reports whether c writes the leader election Lease.
func (c call) leaseWrite() bool {
	return c.Resource == "leases" && (c.Verb == "create" || c.Verb == "update")
}

// write reports whether c may change what the API server stores, the Lease aside: the reviews by which a
// replica learns who it is store nothing.
func (c call) write() bool {
	switch c.Verb {
	case "get", "list", "watch":
		return false
	}
	return c.Resource != "leases" && !strings.HasSuffix(c.Resource, "reviews")
}

func (c call) String() string {
	return fmt.Sprintf("%s %s (sent %s, answered %s, status %d)", strings.ToUpper(c.Verb), c.Path,
		c.Sent.Format("15:04:05.000"), c.Answered.Format("15:04:05.000"), c.Status)
}

// replica is one celaudit process, which reaches the API server only through its own recording proxy.
type replica struct {
	name  string
	cmd   *exec.Cmd
	proxy *httptest.Server
	out   *lockedBuffer

	mu    sync.Mutex
	calls []call

	exited  chan struct{}
	exitErr error // set before exited is closed
}

// startReplica runs the operator binary as id, with leader election in the identity's namespace, reports
// listing every verdict and short intervals, through a new proxy.
func startReplica(t *testing.T, env *envtestutil.Env, id envtestutil.Identity, name string, args ...string) *replica {
	t.Helper()
	r := &replica{name: name, out: &lockedBuffer{}, exited: make(chan struct{})}
	// TLS: client-go sends a kubeconfig's token only over TLS.
	r.proxy = httptest.NewTLSServer(r.proxyTo(t, env.Config))
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.proxy.Certificate().Raw})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: envtest, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: celaudit, user: {token: %q}}]
contexts: [{name: envtest, context: {cluster: envtest, user: celaudit}}]
current-context: envtest
`, r.proxy.URL, base64.StdEncoding.EncodeToString(ca), id.Config.BearerToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(binary,
		"--leader-elect", "--leader-election-namespace="+id.Namespace,
		"--leader-election-lease-duration="+leaseDuration.String(),
		"--leader-election-renew-deadline="+renewDeadline.String(),
		"--leader-election-retry-period="+retryPeriod.String(),
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--report-results=pass,fail,warn,error,skip", "--report-coalesce=200ms", "--readiness-interval=200ms",
		"--zap-log-level=info")
	r.cmd.Args = append(r.cmd.Args, args...) // later flags win
	r.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting replica %s: %v", name, err)
	}
	go func() {
		r.exitErr = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		r.signal(t, syscall.SIGKILL)
		<-r.exited
		r.proxy.Close()
		if t.Failed() {
			t.Logf("replica %s logged:\n%s", r.name, r.out.tail(60))
			var failed []string
			for _, c := range r.recorded(func(c call) bool { return !c.ok() && c.Verb != "watch" }) {
				failed = append(failed, c.String())
			}
			t.Logf("replica %s made %d requests; these failed:\n%s", r.name, len(r.recorded(func(call) bool { return true })),
				strings.Join(failed[max(0, len(failed)-20):], "\n"))
		}
	})
	return r
}

// proxyTo returns the proxy of the replica: it forwards to the API server, the replica's bearer token
// included, streams watches, and records every request.
func (r *replica) proxyTo(t *testing.T, cfg *rest.Config) http.Handler {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := rest.TransportFor(rest.AnonymousClientConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     recording{replica: r, upstream: upstream},
		FlushInterval: -1,
		ErrorLog:      nil,
	}
}

// recording is the proxy's transport: it records each request the replica makes.
type recording struct {
	replica  *replica
	upstream http.RoundTripper
}

func (rec recording) RoundTrip(req *http.Request) (*http.Response, error) {
	c := describe(req)
	if c.leaseWrite() && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		// JSON or protobuf, as the client chose.
		obj, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decoding the Lease written by replica %s: %w", rec.replica.name, err)
		}
		lease, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return nil, fmt.Errorf("replica %s wrote a %T to the leases", rec.replica.name, obj)
		}
		c.Holder = ptr.Deref(lease.Spec.HolderIdentity, "")
	}
	c.Sent = time.Now()
	resp, err := rec.upstream.RoundTrip(req)
	c.Answered = time.Now()
	if resp != nil {
		c.Status = resp.StatusCode
	}
	rec.replica.mu.Lock()
	rec.replica.calls = append(rec.replica.calls, c)
	rec.replica.mu.Unlock()
	return resp, err
}

// describe returns the verb, resource, namespace and name of a request.
func describe(req *http.Request) call {
	c := call{Path: req.URL.Path}
	r := envtestutil.DescribeRequest(req)
	c.Verb, c.Resource, c.Namespace, c.Name = r.Verb, r.Resource, r.Namespace, r.Name
	return c
}

// recorded returns the requests recorded so far that match.
func (r *replica) recorded(match func(call) bool) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if match(c) {
			out = append(out, c)
		}
	}
	return out
}

// signal sends sig to the replica's process, unless it has exited.
func (r *replica) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	select {
	case <-r.exited:
		return
	default:
	}
	if err := r.cmd.Process.Signal(sig); err != nil && !strings.Contains(err.Error(), "process already finished") {
		t.Fatalf("sending %s to replica %s: %v", sig, r.name, err)
	}
}

// waitExit waits until the replica's process has exited and returns its exit code.
func (r *replica) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(timeout):
		t.Fatalf("replica %s did not exit within %s", r.name, timeout)
	}
	return r.cmd.ProcessState.ExitCode()
}

// holding is the time a replica held the lease, as the requests of its proxy show: from the sending of its
// first successful acquisition to the sending of its release, or, without a release, its last successful
// renewal sent plus the lease duration. The lease is held for at most that long by another replica's
// account: a standby measures the lease from when it observed the renewal, after the renewal was sent.
type holding struct {
	from, until time.Time
	released    bool
}

// held returns the time r held the lease, and false when it never did.
func (r *replica) held() (holding, bool) {
	var h holding
	var found bool
	for _, c := range r.recorded(func(c call) bool { return c.leaseWrite() && c.ok() }) {
		switch {
		case c.Holder == "":
			h.until, h.released = c.Sent, true
		case !found:
			h.from, h.until, found = c.Sent, c.Sent.Add(leaseDuration), true
		default:
			h.until = c.Sent.Add(leaseDuration)
		}
	}
	return h, found
}

// waitLeader waits until r has acquired the lease.
func (r *replica) waitLeader(t *testing.T, timeout time.Duration) holding {
	t.Helper()
	var h holding
	envtestutil.Eventually(t, timeout, func() error {
		var ok bool
		select {
		case <-r.exited:
			t.Fatalf("replica %s exited (%v) before it acquired the lease", r.name, r.exitErr)
		default:
		}
		if h, ok = r.held(); !ok {
			return fmt.Errorf("replica %s has not acquired the lease", r.name)
		}
		return nil
	})
	return h
}

// waitStandby waits until r, not leading, has tried to acquire the lease.
func (r *replica) waitStandby(t *testing.T) {
	t.Helper()
	envtestutil.Eventually(t, time.Minute, func() error {
		if len(r.recorded(func(c call) bool { return c.Resource == "leases" && c.Verb == "get" && c.ok() })) == 0 {
			return fmt.Errorf("replica %s has not read the lease", r.name)
		}
		return nil
	})
}

// writes returns the writes of r the API server received (whatever it answered).
func (r *replica) writes() []call {
	return r.recorded(func(c call) bool { return c.write() && c.Status != 0 })
}

// assertSingleWriter checks, from the proxies' records, that the replicas held the lease one after the other,
// each once at most, and that every write of each reached the API server while it held the lease: sent
// after it was acquired, answered before it could have expired or was released. A write refused without
// being sent leaves no record.
func assertSingleWriter(t *testing.T, replicas ...*replica) {
	t.Helper()
	var prev *replica
	var prevHeld holding
	for _, r := range replicas {
		h, ok := r.held()
		for _, w := range r.writes() {
			if !ok || w.Sent.Before(h.from) || w.Answered.After(h.until) {
				t.Errorf("replica %s wrote outside the time it held the lease (%s to %s): %s", r.name,
					h.from.Format("15:04:05.000"), h.until.Format("15:04:05.000"), w)
			}
		}
		if !ok {
			continue
		}
		if prev != nil && !prevHeld.until.Before(h.from) {
			t.Errorf("replicas %s (until %s) and %s (from %s) held the lease at once", prev.name,
				prevHeld.until.Format("15:04:05.000"), r.name, h.from.Format("15:04:05.000"))
		}
		prev, prevHeld = r, h
	}
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written.
func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tail returns the last n lines written.
func (l *lockedBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(l.b.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
