package controllers

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/crdrules"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/internal/vap"
)

// Options are celaudit's settings; BindFlags exposes them as command-line flags.
type Options struct {
	MetricsAddr          string
	ProbeAddr            string
	LeaderElect          bool
	LeaderElectionNS     string
	ResyncPeriod         time.Duration
	Workers              int
	PageSize             int64
	QPS                  float32
	Burst                int
	ReportVerdicts       string
	MaxResultsPerReport  int
	MaxReportBytes       int
	ReportCoalesce       time.Duration
	ReportWorkers        int
	ExcludeCRDGroups     string
	PprofAddr            string
	SkipControllerChecks bool // tests start several managers in one process
	// ReadBackoff is the first wait after a failed read of an audited resource; it doubles with each
	// further failure, up to 5 minutes. Not a flag: tests shorten it.
	ReadBackoff time.Duration
	// Logger receives the operator's logs; ctrl.Log when unset. Tests set it to read what is logged.
	Logger logr.Logger
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
		MetricsAddr:    ":8080",
		ProbeAddr:      ":8081",
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
		ReportWorkers:    8,
		ExcludeCRDGroups: v1alpha2.GroupVersion.Group,
	}
}

// BindFlags registers the options as flags on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, "Address of the health and readiness probes.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader, so that only one replica audits and writes reports.")
	fs.StringVar(&o.LeaderElectionNS, "leader-election-namespace", o.LeaderElectionNS, "Namespace of the leader election lease (default: the pod's namespace).")
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
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", o.PprofAddr, "Address of the pprof endpoint; empty or 0 disables it.")
	fs.StringVar(&o.ExcludeCRDGroups, "exclude-crd-groups", o.ExcludeCRDGroups, "Comma-separated API groups whose CRDs are not audited.")
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

// Scheme returns the scheme of every type celaudit reads with a typed client.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(v1alpha2.AddToScheme(s))
	return s
}

// Operator is a wired celaudit: run it with Start.
type Operator struct {
	ctrl.Manager
	// Settled reports whether every policy is registered, every audited resource has been read and no rescan
	// is pending. Reports are written once it has been true.
	Settled func() bool
	// Results holds the current results.
	Results *results.Store
}

// NewOperator wires celaudit: the result store, the scan engine and every reconciler.
func NewOperator(cfg *rest.Config, o Options) (*Operator, error) {
	verdicts, err := o.verdicts()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = o.QPS, o.Burst

	log := o.Logger
	if log.GetSink() == nil {
		log = ctrl.Log
	}
	managed := labels.SelectorFromSet(labels.Set{report.ManagedByLabel: report.ManagedByValue})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme(),
		Logger:                  log,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "celaudit.celaudit.io",
		LeaderElectionNamespace: o.LeaderElectionNS,
		Cache: cache.Options{
			// Nothing celaudit reads from its cache (policies, params, namespaces, its own reports) needs
			// managedFields, often the largest part of a small object.
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				// Only our own reports are cached: other tools' reports can be large and are none of our business.
				// Ours are kept compacted: a digest of their content instead of their results.
				&v1alpha2.PolicyReport{}:        {Label: managed, Transform: report.ForCache},
				&v1alpha2.ClusterPolicyReport{}: {Label: managed, Transform: report.ForCache},
			}},
		PprofBindAddress: o.PprofAddr,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding readiness check: %w", err)
	}

	dyn, err := dynamic.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	reader, err := scan.NewClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("creating the audit client: %w", err)
	}
	notifier := NewNotifier()
	store := results.NewStore(notifier.Notify, results.KeepPasses(slices.Contains(verdicts, audit.Pass)))
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	resources := NewDiscovery(disc)
	events := mgr.GetEventRecorder("celaudit")
	readErrors := &ReadErrorEvents{Reader: mgr.GetClient(), Recorder: events, Log: log.WithName("events")}
	engine := scan.New(reader, store, log.WithName("scan"), scan.Options{
		PageSize:    o.PageSize,
		Workers:     o.Workers,
		Backoff:     o.ReadBackoff,
		Namespaced:  resources.Namespaced,
		OnReadError: readErrors.ReadError,
		// Report writes held back for the first audit or a rescan go once it ends.
		OnSettled: notifier.Recheck,
	})
	if err := mgr.Add(engine); err != nil {
		return nil, fmt.Errorf("adding scan engine: %w", err)
	}
	gate := NewGate(CRDSource, VAPSource)
	// Reading starts once every policy the cluster holds is registered: each resource is then listed once.
	gate.OnOpen(engine.Release)
	// With no policy covering any resource, the first audit is done as the gate opens.
	gate.OnOpen(notifier.Recheck)
	ctrlOpts := controllerOptions(o.Workers, o.SkipControllerChecks)
	refresher := &Refresher{Discovery: resources, Interval: 5 * time.Minute, Delay: 500 * time.Millisecond}
	if err := mgr.Add(refresher); err != nil {
		return nil, fmt.Errorf("adding discovery refresher: %w", err)
	}

	namespaces, err := newCachedNamespaces(context.Background(), mgr.GetCache())
	if err != nil {
		return nil, err
	}

	excluded := map[string]bool{}
	for _, g := range strings.Split(o.ExcludeCRDGroups, ",") {
		if g = strings.TrimSpace(g); g != "" {
			excluded[g] = true
		}
	}
	if err := (&CRDReconciler{
		Client:   mgr.GetClient(),
		Registry: engine,
		Compile: func(crd *apiextensionsv1.CustomResourceDefinition) audit.Policy {
			return crdrules.Compile(crd, crdrules.Options{})
		},
		Audited: func(crd *apiextensionsv1.CustomResourceDefinition) bool { return !excluded[crd.Spec.Group] },
		Resync:  o.ResyncPeriod,
		Gate:    gate,
		Changed: refresher.Trigger,
	}).SetupWithManager(mgr, ctrlOpts); err != nil {
		return nil, fmt.Errorf("setting up CRD controller: %w", err)
	}
	vapr := &VAPReconciler{
		Client:     mgr.GetClient(),
		Registry:   engine,
		Discovery:  resources,
		Namespaces: namespaces,
		Resync:     o.ResyncPeriod,
		Gate:       gate,
	}
	vapr.Params = NewParams(dyn, func() vap.ResourceResolver { return resources.Snapshot() }, vapr.ParamsChanged)
	if err := mgr.Add(vapr.Params); err != nil {
		return nil, fmt.Errorf("adding param source: %w", err)
	}
	if err := vapr.SetupWithManager(mgr, ctrlOpts); err != nil {
		return nil, fmt.Errorf("setting up ValidatingAdmissionPolicy controller: %w", err)
	}
	if err := (&NamespaceReconciler{
		Client:     mgr.GetClient(),
		Registry:   engine,
		Dependents: vapr.NamespaceDependents,
		Since:      time.Now(),
	}).SetupWithManager(mgr, ctrlOpts); err != nil {
		return nil, fmt.Errorf("setting up namespace controller: %w", err)
	}
	settled := func() bool { return gate.Open() && engine.Synced() }
	// Only the first audit holds reports back: later rescans (a policy edit, a resync) update results in
	// place, and holding every namespace's writes until they finish would delay unrelated changes.
	var audited atomic.Bool
	firstAuditDone := func() bool {
		if audited.Load() {
			return true
		}
		if settled() {
			audited.Store(true)
			return true
		}
		return false
	}
	writes := newReportWrites()
	// Registration fails when several operators share a process (tests); metrics then stay with the first.
	_ = metrics.Registry.Register(writes)
	_ = metrics.Registry.Register(newResultCollector(store))
	if err := (&ReportReconciler{
		Client:     mgr.GetClient(),
		APIReader:  mgr.GetAPIReader(),
		Events:     events,
		Results:    store,
		Ready:      firstAuditDone,
		Notifier:   notifier,
		Options:    report.Options{ListVerdicts: verdicts, MaxResultsPerReport: o.MaxResultsPerReport, MaxReportBytes: o.MaxReportBytes},
		Coalesce:   o.ReportCoalesce,
		Writes:     writes,
		Rescanning: func() bool { return !engine.Synced() },
	}).SetupWithManager(mgr, controllerOptions(o.ReportWorkers, o.SkipControllerChecks)); err != nil {
		return nil, fmt.Errorf("setting up report controller: %w", err)
	}
	if err := mgr.AddReadyzCheck("audit", func(*http.Request) error {
		if !firstAuditDone() {
			return fmt.Errorf("first audit in progress")
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adding audit readiness check: %w", err)
	}
	return &Operator{Manager: mgr, Settled: settled, Results: store}, nil
}

func controllerOptions(workers int, skipNameValidation bool) func(*ctrl.Builder) *ctrl.Builder {
	return func(b *ctrl.Builder) *ctrl.Builder {
		return b.WithOptions(controller.Options{
			MaxConcurrentReconciles: max(1, workers),
			SkipNameValidation:      ptr.To(skipNameValidation),
		})
	}
}
