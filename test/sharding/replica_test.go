package sharding

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
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

// binary is the operator built once for the package's tests.
var binary string

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "celaudit-sharding")
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

// call is one request a member made, as its proxy saw it.
type call struct {
	Member    string
	Verb      string // get, list, watch, create, update, patch, delete
	Resource  string // plural resource name; "" for discovery and other non-resource paths
	Namespace string
	Name      string
	Path      string
	// ShardSelector is the request's shardSelector parameter; ShardInfo whether a LIST's answer says the API
	// server applied it (metadata.shardInfo), and Echoed the selector it says it applied.
	ShardSelector string
	ShardInfo     bool
	Echoed        string
	// Epoch and Shard are the celaudit.io/shard-epoch and celaudit.io/shard annotations of a report written
	// (create, update); Epoch is -1 when the report written has none.
	Epoch int64
	Shard string
	// Revision is the resourceVersion of the report, Lease or AuditPolicy the API server answered a write
	// with: etcd's revision of the write, which orders the writes of every member. A deletion has its
	// precondition's, the revision it deleted: nothing was written in between.
	Revision int64
	// Holder is the holderIdentity of a Lease written ("" when the write releases it).
	Holder string
	Status int // 0 when no answer came
}

// ok reports whether the API server accepted the request.
func (c call) ok() bool { return c.Status >= 200 && c.Status < 300 }

// reportWrite reports whether c writes a PolicyReport or a ClusterPolicyReport.
func (c call) reportWrite() bool {
	return (c.Resource == "policyreports" || c.Resource == "clusterpolicyreports") && c.write()
}

// leaseWrite reports whether c writes a Lease: leader election's acquisitions, renewals and releases.
func (c call) leaseWrite() bool { return c.Resource == "leases" && c.write() }

// policyWrite reports whether c writes an AuditPolicy (its status, its finalizer), which the leader alone may.
func (c call) policyWrite() bool { return c.Resource == "auditpolicies" && c.write() }

func (c call) write() bool {
	return c.Verb == "create" || c.Verb == "update" || c.Verb == "patch" || c.Verb == "delete"
}

func (c call) String() string {
	return fmt.Sprintf("member %s: %s %s (epoch %d, shard %q, revision %d, status %d)", c.Member, strings.ToUpper(c.Verb), c.Path,
		c.Epoch, c.Shard, c.Revision, c.Status)
}

// member is one celaudit process, a pod of the StatefulSet, which reaches the API server only through its
// own recording proxy.
type member struct {
	name  string // the pod's name
	cmd   *exec.Cmd
	proxy *httptest.Server
	out   *lockedBuffer

	mu    sync.Mutex
	calls []call

	exited  chan struct{}
	exitErr error // set before exited is closed
}

// startMember runs the operator binary as the pod name of the StatefulSet set in the identity's namespace,
// with leader election, reports listing every verdict and short intervals, through a new proxy.
func startMember(t *testing.T, env *envtestutil.Env, id envtestutil.Identity, set, name string) *member {
	t.Helper()
	m := &member{name: name, out: &lockedBuffer{}, exited: make(chan struct{})}
	// TLS: client-go sends a kubeconfig's token only over TLS.
	m.proxy = httptest.NewTLSServer(m.proxyTo(t, env.Config))
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.proxy.Certificate().Raw})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: envtest, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: celaudit, user: {token: %q}}]
contexts: [{name: envtest, context: {cluster: envtest, user: celaudit}}]
current-context: envtest
`, m.proxy.URL, base64.StdEncoding.EncodeToString(ca), id.Config.BearerToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	m.cmd = exec.Command(binary,
		"--leader-elect", "--leader-election-namespace="+id.Namespace,
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms",
		"--shard-statefulset="+set,
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--report-results=pass,fail,warn,error,skip", "--report-coalesce=200ms", "--readiness-interval=200ms",
		"--zap-log-level=info")
	// As the downward API sets them in the pod.
	m.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "POD_NAME="+name, "POD_NAMESPACE="+id.Namespace)
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("starting member %s: %v", name, err)
	}
	go func() {
		m.exitErr = m.cmd.Wait()
		close(m.exited)
	}()
	t.Cleanup(func() {
		m.signal(t, syscall.SIGKILL)
		<-m.exited
		m.proxy.Close()
		if t.Failed() {
			t.Logf("member %s logged:\n%s", m.name, m.out.tail(40))
			counts := map[string]int{}
			for _, c := range m.recorded(func(call) bool { return true }) {
				counts[fmt.Sprintf("%s %s %d", c.Verb, c.Resource, c.Status)]++
			}
			t.Logf("member %s made these requests: %v", m.name, counts)
		}
	})
	return m
}

// proxyTo returns the proxy of the member: it forwards to the API server, the member's bearer token
// included, streams watches, and records every request.
func (m *member) proxyTo(t *testing.T, cfg *rest.Config) http.Handler {
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
		Transport:     recording{member: m, upstream: upstream},
		FlushInterval: -1,
	}
}

// recording is the proxy's transport: it records each request the member makes.
type recording struct {
	member   *member
	upstream http.RoundTripper
}

// metadataOf is the part of a report, or of a list, that the recording reads.
type metadataOf struct {
	// Preconditions are those of a DeleteOptions.
	Preconditions struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"preconditions"`
	Metadata struct {
		Name            string            `json:"name"`
		ResourceVersion string            `json:"resourceVersion"`
		Annotations     map[string]string `json:"annotations"`
		ShardInfo       *struct {
			Selector string `json:"selector"`
		} `json:"shardInfo"`
	} `json:"metadata"`
}

// leaseOf decodes a Lease, in JSON or in protobuf (which leader election uses).
func leaseOf(body []byte) (*coordinationv1.Lease, error) {
	obj, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		return nil, err
	}
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return nil, fmt.Errorf("a %T, not a Lease", obj)
	}
	return lease, nil
}

func (rec recording) RoundTrip(req *http.Request) (*http.Response, error) {
	c := describe(req)
	c.Member = rec.member.name
	if c.leaseWrite() && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		written, err := leaseOf(body)
		if err != nil {
			return nil, fmt.Errorf("decoding the Lease written by member %s: %w", rec.member.name, err)
		}
		c.Holder = ptr.Deref(written.Spec.HolderIdentity, "")
	}
	if c.reportWrite() && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		var written metadataOf
		if err := json.Unmarshal(body, &written); err != nil {
			return nil, fmt.Errorf("decoding the report written by member %s: %w", rec.member.name, err)
		}
		switch c.Verb {
		case "delete":
			// The deletion happened at the revision its precondition names, before any later write.
			if rv := written.Preconditions.ResourceVersion; rv != "" {
				if _, err := fmt.Sscan(rv, &c.Revision); err != nil {
					return nil, fmt.Errorf("member %s deleted %s on resourceVersion %q: %w", rec.member.name, c.Path, rv, err)
				}
			}
		case "create":
			c.Name = written.Metadata.Name // the path names the collection
			fallthrough
		default:
			c.Epoch, c.Shard = epochOf(written.Metadata.Annotations), written.Metadata.Annotations["celaudit.io/shard"]
		}
	}
	resp, err := rec.upstream.RoundTrip(req)
	if resp != nil {
		c.Status = resp.StatusCode
	}
	// The answers read whole: a report written (its revision), a LIST of the scanner (whether the API server
	// applied the shardSelector). Watches stream, and are not read.
	ordered := (c.reportWrite() || c.leaseWrite() || c.policyWrite()) && c.Verb != "delete"
	if err == nil && c.ok() && (ordered || (c.Verb == "list" && c.ShardSelector != "")) {
		body, readErr := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if readErr != nil {
			return nil, readErr
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		var answered metadataOf
		decoded := json.Unmarshal(body, &answered) == nil
		if c.leaseWrite() {
			// Leader election writes its Lease in protobuf.
			lease, err := leaseOf(body)
			if err != nil {
				return nil, fmt.Errorf("decoding the Lease the API server answered member %s with: %w", rec.member.name, err)
			}
			answered.Metadata.ResourceVersion, decoded = lease.ResourceVersion, true
		}
		if decoded {
			if info := answered.Metadata.ShardInfo; info != nil {
				c.ShardInfo, c.Echoed = true, info.Selector
			}
			if _, err := fmt.Sscan(answered.Metadata.ResourceVersion, &c.Revision); err != nil && ordered {
				return nil, fmt.Errorf("the API server answered member %s's write of %s with resourceVersion %q: %w",
					rec.member.name, c.Path, answered.Metadata.ResourceVersion, err)
			}
		}
	}
	rec.member.mu.Lock()
	rec.member.calls = append(rec.member.calls, c)
	rec.member.mu.Unlock()
	return resp, err
}

// epochOf returns the epoch annotation's value, -1 when there is none.
func epochOf(annotations map[string]string) int64 {
	v, ok := annotations["celaudit.io/shard-epoch"]
	if !ok {
		return -1
	}
	var e int64
	if _, err := fmt.Sscan(v, &e); err != nil {
		return -1
	}
	return e
}

// describe returns the verb, resource, namespace and name of a request.
func describe(req *http.Request) call {
	c := call{Path: req.URL.Path, ShardSelector: req.URL.Query().Get("shardSelector"), Epoch: -1}
	r := envtestutil.DescribeRequest(req)
	c.Verb, c.Resource, c.Namespace, c.Name = r.Verb, r.Resource, r.Namespace, r.Name
	return c
}

// recorded returns the requests recorded so far that match.
func (m *member) recorded(match func(call) bool) []call {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []call
	for _, c := range m.calls {
		if match(c) {
			out = append(out, c)
		}
	}
	return out
}

// signal sends sig to the member's process, unless it has exited.
func (m *member) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	select {
	case <-m.exited:
		return
	default:
	}
	if err := m.cmd.Process.Signal(sig); err != nil && !strings.Contains(err.Error(), "process already finished") {
		t.Fatalf("sending %s to member %s: %v", sig, m.name, err)
	}
}

// stop stops the member gracefully, as the StatefulSet controller does on a scale-down, and checks that it
// exits cleanly.
func (m *member) stop(t *testing.T) {
	t.Helper()
	m.signal(t, syscall.SIGTERM)
	if code := m.waitExit(t, time.Minute); code != 0 {
		t.Errorf("member %s exited with %d after SIGTERM, want 0", m.name, code)
	}
}

// waitExit waits until the member's process has exited and returns its exit code.
func (m *member) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-m.exited:
	case <-time.After(timeout):
		t.Fatalf("member %s did not exit within %s", m.name, timeout)
	}
	return m.cmd.ProcessState.ExitCode()
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

// tail returns the last n lines written.
func (l *lockedBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(l.b.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
