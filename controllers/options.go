package controllers

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/auditpolicy"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/shard"
)

// Options are celaudit's settings; BindFlags exposes them as command-line flags.
type Options struct {
	MetricsAddr string
	// MetricsSecure serves metrics over HTTPS to authenticated and authorized clients only (a token that may
	// get the /metrics non-resource URL); false serves plain HTTP to anyone who can reach the port.
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key for the metrics endpoint (watched for rotation); empty uses a
	// self-signed certificate generated at start.
	MetricsCertDir string
	// EnableHTTP2 lets the metrics endpoint speak HTTP/2, off by default against HTTP/2 stream-reset floods
	// (CVE-2023-44487, CVE-2023-39325).
	EnableHTTP2      bool
	ProbeAddr        string
	LeaderElect      bool
	LeaderElectionNS string
	// LeaseDuration, RenewDeadline and RetryPeriod time leader election: a standby takes over a lease not
	// renewed for LeaseDuration; the leader writes only within RenewDeadline of its last renewal's start,
	// and gives the lease up when it cannot renew within it; RetryPeriod is the interval of renewals and of
	// a standby's attempts to acquire.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	ResyncPeriod                              time.Duration
	Workers                                   int
	PageSize                                  int64
	QPS                                       float32
	Burst                                     int
	ReportVerdicts                            string
	MaxResultsPerReport                       int
	MaxReportBytes                            int
	ReportCoalesce                            time.Duration
	ReportWorkers                             int
	// ReportAPI is the API reports are written in: wgpolicy (PolicyReports), openreports (OpenReports'
	// Reports) or both. celaudit never installs the CRDs of either: NewOperator fails when one is missing.
	ReportAPI         string
	ReadinessInterval time.Duration // least time between two computations of the policies' summaries
	ExcludeCRDGroups  string
	PprofAddr         string
	// ManageAdmissionPolicies lets celaudit create, update and delete the ValidatingAdmissionPolicies and
	// bindings of AuditPolicies in Warn and Deny. It needs the admission-policy-manager ClusterRole.
	ManageAdmissionPolicies bool
	// AuditSecrets lets celaudit read Secrets, to audit them and as params. Off, none is ever read: a verdict
	// on a Secret is one bit of its content, which whoever reads the verdict learns.
	AuditSecrets bool
	// AuditMutatingPolicies audits the cluster's MutatingAdmissionPolicies: which stored objects each one would
	// change on their next write (mutation drift). It needs the API server to serve them (Kubernetes 1.36+).
	AuditMutatingPolicies bool
	// ExemptNamespaces, ExemptResources (group/resource), ExemptUsers and ExemptGroups are comma-separated
	// exemptions added to the built-in ones: no AuditPolicy's registered pair judges them.
	ExemptNamespaces, ExemptResources, ExemptUsers, ExemptGroups string
	SkipControllerChecks                                         bool // tests start several managers in one process
	// ReadBackoff is the first wait after a failed read of an audited resource; it doubles with each
	// further failure, up to MaxReadBackoff. Not a flag: tests shorten it.
	ReadBackoff time.Duration
	// MaxReadBackoff bounds the wait between reads of a resource that cannot be read, such as one celaudit
	// may not list: once read access is granted, its audit starts within this time. A forbidden LIST costs
	// the API server little, so a minute, not the 5 minutes of the scanner's default. Not a flag: tests
	// shorten it.
	MaxReadBackoff time.Duration
	// ShardIndex and ShardCount (--shard-index, --shard-count) make this replica the ShardIndex-th of
	// ShardCount members of a sharded audit, whose membership never changes: both or neither.
	ShardIndex, ShardCount optionalInt
	// ShardStatefulSet (--shard-statefulset) makes this replica a member of a sharded audit whose members are
	// the pods of that StatefulSet, in PodNamespace: its index is the ordinal of PodName, the count the
	// StatefulSet's replicas, the epoch its generation.
	ShardStatefulSet string
	// PodName and PodNamespace name this replica's pod (--pod-name, --pod-namespace; default $POD_NAME and
	// $POD_NAMESPACE, the namespace the pod runs in for the latter).
	PodName, PodNamespace string
	// Shard, when set, is the membership of a sharded audit, in place of the flags above (tests, or a program
	// embedding the operator).
	Shard shard.Source
	// Logger receives the operator's logs; ctrl.Log when unset. Tests set it to read what is logged.
	Logger logr.Logger

	// beforeVAPCompile, when set, is called with a ValidatingAdmissionPolicy's name before it is compiled:
	// tests hold a compile back with it.
	beforeVAPCompile func(policy string)
}

// optionalInt is a flag.Value for an int that may be left unset.
type optionalInt struct {
	N     int
	Given bool
}

func (v *optionalInt) String() string {
	if v == nil || !v.Given {
		return ""
	}
	return strconv.Itoa(v.N)
}

func (v *optionalInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("invalid integer %q: %w", s, err)
	}
	v.N, v.Given = n, true
	return nil
}

// float32Value is a flag.Value for a float32, which the flag package lacks.
type float32Value float32

func (v *float32Value) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 32) }

func (v *float32Value) Set(s string) error {
	f, err := strconv.ParseFloat(s, 32)
	if err != nil {
		return fmt.Errorf("invalid number %q: %w", s, err)
	}
	*v = float32Value(f)
	return nil
}

// DefaultOptions returns the defaults of every flag.
func DefaultOptions() Options {
	return Options{
		MetricsAddr:   ":8443",
		MetricsSecure: true,
		ProbeAddr:     ":8081",
		// controller-runtime's and kube-controller-manager's defaults.
		LeaseDuration:  15 * time.Second,
		RenewDeadline:  10 * time.Second,
		RetryPeriod:    2 * time.Second,
		ResyncPeriod:   time.Hour,
		Workers:        runtime.NumCPU(),
		PageSize:       500,
		QPS:            50,
		Burst:          400,
		ReportVerdicts: "fail,warn,error,skip",
		MaxReportBytes: report.DefaultMaxReportBytes,
		// A change rewrites the chunk holding its object: small chunks keep each write, whose API server
		// cost grows with its size, to a few tens of KB.
		MaxResultsPerReport: 32,
		ReportCoalesce:      time.Second,
		// The first audit and a policy edit write hundreds of chunks at once; each write waits on the API
		// server far longer than it takes to build, so more writers than cores keep it busy.
		ReportWorkers: 8,
		ReportAPI:     ReportAPIWGPolicy,
		// Reports hold no rules to audit, and listing them all would read every report of every tool.
		ExcludeCRDGroups: v1alpha2.GroupVersion.Group + "," + openreportsv1alpha1.GroupName,
		// Summing every result takes milliseconds per 100,000 objects; a few seconds bound it to a negligible
		// share of a CPU while changes stream in.
		ReadinessInterval:     5 * time.Second,
		MaxReadBackoff:        time.Minute,
		PodName:               os.Getenv("POD_NAME"),
		PodNamespace:          os.Getenv("POD_NAMESPACE"),
		AuditMutatingPolicies: true,
	}
}

// BindFlags registers the options as flags on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "Serve metrics over HTTPS, only to clients whose token may get the /metrics non-resource URL (the metrics-reader ClusterRole); false serves plain HTTP to anyone.")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-path", o.MetricsCertDir, "Directory holding tls.crt and tls.key of the metrics endpoint, reloaded when they change; empty uses a self-signed certificate.")
	fs.BoolVar(&o.EnableHTTP2, "enable-http2", o.EnableHTTP2, "Let the metrics endpoint speak HTTP/2 (off: HTTP/1.1 only, against HTTP/2 stream-reset floods).")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, "Address of the health and readiness probes.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader, so that only one replica audits and writes reports.")
	fs.StringVar(&o.LeaderElectionNS, "leader-election-namespace", o.LeaderElectionNS, "Namespace of the leader election lease (default: the pod's namespace).")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", o.LeaseDuration, "Time a standby waits after the leader's last renewal before it takes the lease over: the longest failover after a leader dies. Whole seconds.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", o.RenewDeadline, "Time after the start of its last successful renewal at which the leader stops writing, and gives the lease up if it could not renew; shorter than the lease duration, whose remainder absorbs clock drift and writes in flight.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", o.RetryPeriod, "Interval of the leader's renewals and of a standby's attempts to acquire the lease.")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", o.ResyncPeriod, "Interval of the periodic full re-evaluation of every policy; 0 disables it. Unchanged results cause no writes.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Objects evaluated in parallel.")
	fs.Int64Var(&o.PageSize, "page-size", o.PageSize, "Limit of each paginated LIST of audited objects.")
	fs.Var((*float32Value)(&o.QPS), "kube-api-qps", "Queries per second to the API server.")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "Burst of queries to the API server; the first audit writes every report at once.")
	fs.StringVar(&o.ReportVerdicts, "report-results", o.ReportVerdicts, "Comma-separated verdicts listed in reports (pass,fail,warn,error,skip); the summary always counts all of them.")
	fs.IntVar(&o.MaxResultsPerReport, "max-results-per-report", o.MaxResultsPerReport, "Split a namespace's report into chunks of at most this many listed results (a change rewrites only its chunk); 0 splits by size only.")
	fs.IntVar(&o.MaxReportBytes, "max-report-bytes", o.MaxReportBytes, "Split a namespace's report into chunks before its results reach this many bytes.")
	fs.DurationVar(&o.ReportCoalesce, "report-coalesce", o.ReportCoalesce, "Least time between two writes of a namespace's reports; a change is written at once, later ones within this time are batched.")
	fs.IntVar(&o.ReportWorkers, "report-workers", o.ReportWorkers, "Namespaces whose reports are written in parallel; a first audit or a policy edit writes many report chunks at once.")
	fs.StringVar(&o.ReportAPI, "report-api", o.ReportAPI, "API of the reports written: wgpolicy (wgpolicyk8s.io PolicyReports and ClusterPolicyReports), openreports (openreports.io Reports and ClusterReports) or both. celaudit does not install their CRDs: it exits at start when one is missing.")
	fs.DurationVar(&o.ReadinessInterval, "readiness-interval", o.ReadinessInterval, "Least time between two computations of each policy's summary (the celaudit_policy_* metrics and the SafeToEnforce Events); changes within it are batched.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", o.PprofAddr, "Address of the pprof endpoint; empty or 0 disables it.")
	fs.BoolVar(&o.ManageAdmissionPolicies, "manage-admission-policies", o.ManageAdmissionPolicies, "Register a ValidatingAdmissionPolicy and binding for each AuditPolicy in Warn or Deny (needs the admission-policy-manager ClusterRole). Without it such policies are audited, not enforced.")
	fs.BoolVar(&o.AuditSecrets, "audit-secrets", o.AuditSecrets, "Audit Secrets and read params of kind Secret. Off, no Secret is read: a policy covering Secrets gets one skip result saying so, and one reading Secret params an error result. On, each verdict on a Secret is one bit of its content, which readers of its namespace's report, and the policy's author through its status, Events and metrics, learn.")
	fs.BoolVar(&o.AuditMutatingPolicies, "audit-mutating-policies", o.AuditMutatingPolicies, "Audit MutatingAdmissionPolicies: report, per stored object, whether each policy would change it on its next write, and how (mutation drift). Ignored when the API server does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicies.")
	fs.StringVar(&o.ExcludeCRDGroups, "exclude-crd-groups", o.ExcludeCRDGroups, "Comma-separated API groups whose CRDs are not audited.")
	fs.StringVar(&o.ExemptNamespaces, "exempt-namespaces", o.ExemptNamespaces, "Comma-separated namespaces no AuditPolicy's admission policy judges, added to the built-in ones (kube-system, kube-node-lease, celaudit's own).")
	fs.StringVar(&o.ExemptResources, "exempt-resources", o.ExemptResources, "Comma-separated group/resource pairs (\"/configmaps\" for the core group, \"example.com/*\" for a whole group) no AuditPolicy's admission policy judges, subresources included, added to the built-in ones.")
	fs.StringVar(&o.ExemptUsers, "exempt-users", o.ExemptUsers, "Comma-separated usernames whose requests no AuditPolicy's admission policy judges, added to the built-in ones (the control plane's and celaudit's own).")
	fs.Var(&o.ShardIndex, "shard-index", "Index of this replica among the --shard-count members of a sharded audit (0-based); with --shard-count, for a fixed membership.")
	fs.Var(&o.ShardCount, "shard-count", "Number of members of a sharded audit; with --shard-index. Each member audits, and writes the reports of, the namespaces whose hash falls in its ranges.")
	fs.StringVar(&o.ShardStatefulSet, "shard-statefulset", o.ShardStatefulSet, "Name of the StatefulSet whose pods are the members of a sharded audit: this pod's ordinal is its index, the StatefulSet's replicas the count; scaling it reshards.")
	fs.StringVar(&o.PodName, "pod-name", o.PodName, "Name of this replica's pod, whose ordinal is its index with --shard-statefulset (default $POD_NAME).")
	fs.StringVar(&o.PodNamespace, "pod-namespace", o.PodNamespace, "Namespace of this replica's pod and of its StatefulSet (default $POD_NAMESPACE, else the namespace the pod runs in).")
	fs.StringVar(&o.ExemptGroups, "exempt-groups", o.ExemptGroups, "Comma-separated groups whose members' requests no AuditPolicy's admission policy judges, added to the built-in ones (system:nodes, system:serviceaccounts:kube-system).")
}

// exemptions returns the exemptions the --exempt-* flags add to the built-in ones. An entry that names no
// namespace, resource, user or group is an error naming its flag.
func (o Options) exemptions() (v1alpha1.Exemptions, error) {
	var e v1alpha1.Exemptions
	for _, f := range []struct {
		flag, value string
		into        *[]string
		check       func(string) error
	}{
		{"exempt-namespaces", o.ExemptNamespaces, &e.Namespaces, auditpolicy.CheckNamespace},
		{"exempt-resources", o.ExemptResources, &e.Resources, func(s string) error { _, err := auditpolicy.ParseResource(s); return err }},
		{"exempt-users", o.ExemptUsers, &e.Users, func(s string) error { return auditpolicy.CheckIdentity("user", s) }},
		{"exempt-groups", o.ExemptGroups, &e.Groups, func(s string) error { return auditpolicy.CheckIdentity("group", s) }},
	} {
		if strings.TrimSpace(f.value) == "" {
			continue
		}
		for i, entry := range strings.Split(f.value, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				return v1alpha1.Exemptions{}, fmt.Errorf("--%s=%q: entry %d is empty", f.flag, f.value, i+1)
			}
			if err := f.check(entry); err != nil {
				return v1alpha1.Exemptions{}, fmt.Errorf("--%s: %w", f.flag, err)
			}
			*f.into = append(*f.into, entry)
		}
	}
	return e, nil
}

// excludedGroups returns the API groups whose CRDs are not audited.
func (o Options) excludedGroups() map[string]bool {
	out := map[string]bool{}
	for _, g := range strings.Split(o.ExcludeCRDGroups, ",") {
		if g = strings.TrimSpace(g); g != "" {
			out[g] = true
		}
	}
	return out
}

func (o Options) verdicts() ([]audit.Verdict, error) {
	var out []audit.Verdict
	for _, s := range strings.Split(o.ReportVerdicts, ",") {
		switch v := audit.Verdict(strings.TrimSpace(s)); v {
		case audit.Pass, audit.Fail, audit.Warn, audit.Error, audit.Skip:
			out = append(out, v)
		case "":
		default:
			return nil, fmt.Errorf("unknown verdict %q in --report-results", s)
		}
	}
	return out, nil
}

// metricsServer returns the options of the metrics endpoint. Secure, it is the kubebuilder default: TLS,
// and a filter that authenticates each scrape's bearer token with a TokenReview and authorizes it with a
// SubjectAccessReview for "get" on the /metrics non-resource URL (config/rbac/metrics_*.yaml).
func (o Options) metricsServer() metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.MetricsAddr, SecureServing: o.MetricsSecure}
	if !o.MetricsSecure {
		return opts
	}
	opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	opts.CertDir = o.MetricsCertDir
	if !o.EnableHTTP2 {
		opts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	return opts
}
