package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// operatorUser is the user the operator authenticates as; the API server's audit log attributes requests to it.
const operatorUser = "celaudit"

// auditPolicy logs, at metadata level, only the operator's requests: the metrics count every client, the
// audit log tells which requests are the operator's.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [` + operatorUser + `]
- level: None
`

// envOptions say how startEnv starts the control plane.
type envOptions struct {
	// dir holds the audit policy and log.
	dir string
	// etcdData is etcd's data directory, kept on stop; empty: a temporary one, removed on stop.
	etcdData string
	// quota is etcd's --quota-backend-bytes; 0 keeps etcd's default (2 GiB, too small for a million objects).
	quota int64
	// audit enables the API server's audit log of the operator's requests.
	audit bool
	// featureGates is the API server's --feature-gates, if any.
	featureGates string
}

// startEnv starts the control plane as envtestutil.Start does, with the API server's audit log enabled for
// the operator's user when o.audit, and returns the audit log's path.
func startEnv(o envOptions) (*envtestutil.Env, string, error) {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return nil, "", err
	}
	te := &envtest.Environment{
		// The OpenReports CRDs too, for runs with --report-api=openreports or both.
		CRDDirectoryPaths: []string{filepath.Join(envtestutil.RepoRoot(), "config", "crd", "bases"),
			filepath.Join(envtestutil.RepoRoot(), "config", "openreports")},
		ErrorIfCRDPathMissing: true,
		// An API server over a million stored objects fills its watch caches before it is ready.
		ControlPlaneStartTimeout: 15 * time.Minute,
		ControlPlaneStopTimeout:  5 * time.Minute,
	}
	etcd := &envtest.Etcd{DataDir: o.etcdData}
	te.ControlPlane.Etcd = etcd
	if o.quota > 0 {
		etcd.Configure().Set("quota-backend-bytes", strconv.FormatInt(o.quota, 10))
	}
	if o.featureGates != "" {
		te.ControlPlane.GetAPIServer().Configure().Set("feature-gates", o.featureGates)
	}
	var logPath string
	if o.audit {
		policy := filepath.Join(o.dir, "audit-policy.yaml")
		logPath = filepath.Join(o.dir, "audit.log")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
			return nil, "", err
		}
		te.ControlPlane.GetAPIServer().Configure().
			Set("audit-policy-file", policy).
			Set("audit-log-path", logPath).
			Set("audit-log-format", "json")
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, "", fmt.Errorf("starting control plane: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		_ = te.Stop()
		return nil, "", fmt.Errorf("creating client: %w", err)
	}
	return &envtestutil.Env{Environment: te, Config: cfg, Client: c}, logPath, nil
}

// window is a measured phase's time span.
type window struct {
	Phase      string
	Start, End time.Time
}

type auditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

var auditVerbs = map[string]string{
	"get": "GET", "list": "LIST", "watch": "WATCH", "create": "POST", "update": "PUT", "patch": "PATCH",
	"delete": "DELETE", "deletecollection": "DELETECOLLECTION",
}

// operatorRequests counts the operator's requests in each window by the time the API server received them,
// in the keys the metrics use. A WATCH is counted when it starts.
func operatorRequests(logPath string, windows []window) (map[string]requests, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]requests{}
	for _, w := range windows {
		out[w.Phase] = requests{}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		if ev.User.Username != operatorUser {
			continue
		}
		if (ev.Verb == "watch") != (ev.Stage == "ResponseStarted") || (ev.Verb != "watch" && ev.Stage != "ResponseComplete") {
			continue
		}
		verb := auditVerbs[ev.Verb]
		if verb == "" {
			verb = strings.ToUpper(ev.Verb)
		}
		key := verb + " " + pathClass(ev.RequestURI)
		if ev.ObjectRef != nil && ev.ObjectRef.Resource != "" {
			key = requestKey(map[string]string{"verb": verb, "group": ev.ObjectRef.APIGroup,
				"resource": ev.ObjectRef.Resource, "subresource": ev.ObjectRef.Subresource})
		}
		for _, w := range windows {
			if !ev.RequestReceivedTimestamp.Before(w.Start) && ev.RequestReceivedTimestamp.Before(w.End) {
				out[w.Phase][key]++
			}
		}
	}
	return out, sc.Err()
}

// pathClass shortens a non-resource URI to its first two segments, e.g. /apis/apps.
func pathClass(uri string) string {
	uri, _, _ = strings.Cut(uri, "?")
	parts := strings.Split(strings.Trim(uri, "/"), "/")
	if len(parts) > 2 {
		parts = parts[:2]
	}
	return "/" + strings.Join(parts, "/")
}
