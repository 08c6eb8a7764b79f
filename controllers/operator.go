package controllers

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/go-logr/logr"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	auditv1alpha1 "github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/auditpolicy"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/scan"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
)

// Scheme returns the scheme of every type celaudit reads with a typed client.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(v1alpha2.AddToScheme(s))
	utilruntime.Must(openreportsv1alpha1.Install(s))
	utilruntime.Must(auditv1alpha1.AddToScheme(s))
	return s
}

// selfReviewTimeout bounds the SelfSubjectReview by which celaudit learns its own identity at start.
const selfReviewTimeout = 30 * time.Second

// Operator is a wired celaudit: run it with Start.
type Operator struct {
	ctrl.Manager
	// Settled reports whether every policy is registered, every audited resource has been read and no rescan
	// is pending. Reports are written once it has been true.
	Settled func() bool
	// Results holds the current results.
	Results *results.Store

	readiness *readiness
	// collectors are the operator's own metrics; the metrics registry holds only the first operator's of a
	// process (tests).
	collectors []prometheus.Collector
}

// NewOperator wires celaudit, as a kubebuilder main does: each step takes what it needs and returns what it
// makes, so the order below is the order of their dependencies. Those who wait for the audit's progress (the
// report reconcilers, readiness, the first audit's end) learn it from the Notifier, which exists before
// anything that changes results.
func NewOperator(cfg *rest.Config, o Options) (*Operator, error) {
	started := time.Now() // the start of the first audit's duration
	s, err := o.parse()
	if err != nil {
		return nil, err
	}
	cfg = clientConfig(cfg, o)
	elect, err := newElection(cfg, o, s.members.sharded())
	if err != nil {
		return nil, err
	}
	// Every client made from here on writes through the fence.
	cfg = elect.fenced(cfg)
	mgr, err := newManager(cfg, o, s, elect)
	if err != nil {
		return nil, err
	}
	a, err := newAudit(cfg, mgr, o, s, started)
	if err != nil {
		return nil, err
	}
	ready, rollups, err := setupPolicies(cfg, mgr, o, s, a)
	if err != nil {
		return nil, err
	}
	writes := newReportWrites()
	if err := setupReports(mgr, o, s, a, writes); err != nil {
		return nil, err
	}
	if err := setupMembership(mgr, o, s.members, a, s.reportAPIs); err != nil {
		return nil, err
	}
	if err := addChecks(mgr, a.progress, o.LeaderElect, s.members); err != nil {
		return nil, err
	}
	cs := append(a.metrics.collectors(), writes, newResultCollector(a.store), newReadinessCollector(ready))
	if rollups != nil {
		cs = append(cs, newRollupCollector(rollups))
	}
	collectors := register(cs...)
	return &Operator{Manager: mgr, Settled: a.progress.Settled, Results: a.store, readiness: ready, collectors: collectors}, nil
}

// settings are the options NewOperator parses before it makes anything, so that a wrong flag fails at once.
type settings struct {
	// verdicts are those listed in reports (--report-results).
	verdicts []audit.Verdict
	// reportAPIs are the APIs reports are written in (--report-api).
	reportAPIs []reportAPI
	// exemptions are those the --exempt-* flags add to the built-in ones.
	exemptions auditv1alpha1.Exemptions
	// members is this replica's place in a sharded audit (--shard-*), none when it is not sharded.
	members membership
	log     logr.Logger
}

// parse parses and checks the options.
func (o Options) parse() (settings, error) {
	if o.ReadinessInterval <= 0 {
		return settings{}, fmt.Errorf("--readiness-interval must be positive, got %s", o.ReadinessInterval)
	}
	if err := o.checkLeaderElection(); err != nil {
		return settings{}, err
	}
	verdicts, err := o.verdicts()
	if err != nil {
		return settings{}, err
	}
	apis, err := parseReportAPIs(o.ReportAPI)
	if err != nil {
		return settings{}, err
	}
	exemptions, err := o.exemptions()
	if err != nil {
		return settings{}, err
	}
	members, err := o.membership()
	if err != nil {
		return settings{}, err
	}
	log := o.Logger
	if log.GetSink() == nil {
		log = ctrl.Log
	}
	return settings{verdicts: verdicts, reportAPIs: apis, exemptions: exemptions, members: members, log: log}, nil
}

// clientConfig returns a copy of cfg with the client limits of the options.
func clientConfig(cfg *rest.Config, o Options) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	return cfg
}

// register registers the operator's metrics and returns them. Registration fails when several operators
// share a process (tests); the registry then keeps the first one's.
func register(cs ...prometheus.Collector) []prometheus.Collector {
	for _, c := range cs {
		_ = metrics.Registry.Register(c)
	}
	return cs
}

// newManager makes the manager and its cache: policies, params, namespaces and celaudit's own reports of the
// APIs written, which must be served. It elects with elect's lock and, stopped, releases the lease at once,
// so that a rolling update hands over without waiting for the lease to expire.
func newManager(cfg *rest.Config, o Options, s settings, elect *election) (ctrl.Manager, error) {
	if err := checkReportCRDs(cfg, o.ReportAPI, s.reportAPIs); err != nil {
		return nil, err
	}
	// Only our own reports are cached, of the APIs written: other tools' reports can be large and are none
	// of our business. Ours are kept compacted: a digest of their content instead of their results.
	scheme := Scheme()
	reports := map[client.Object]cache.ByObject{}
	for _, api := range s.reportAPIs {
		for _, obj := range api.objects() {
			reports[obj] = cache.ByObject{Label: labels.SelectorFromSet(labels.Set(managedSelector())), Transform: withKind(scheme, report.ForCache)}
		}
	}
	if set := s.members.statefulSet; set != nil {
		reports[&appsv1.StatefulSet{}] = set.cacheOptions()
	}
	if s.members.sharded() {
		// The members' AuditShards, in the operator's namespace only (a namespaced Role grants them).
		reports[&auditv1alpha1.AuditShard{}] = cache.ByObject{Namespaces: map[string]cache.Config{s.members.namespace: {}}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                              scheme,
		Logger:                              s.log,
		Metrics:                             o.metricsServer(),
		HealthProbeBindAddress:              o.ProbeAddr,
		LeaderElection:                      o.LeaderElect,
		LeaderElectionID:                    leaderElectionID,
		LeaderElectionResourceLockInterface: elect.lock,
		LeaderElectionReleaseOnCancel:       true,
		LeaseDuration:                       &o.LeaseDuration,
		RenewDeadline:                       &o.RenewDeadline,
		RetryPeriod:                         &o.RetryPeriod,
		Cache: cache.Options{
			// Nothing celaudit reads from its cache (policies, params, namespaces, its own reports) needs
			// managedFields, often the largest part of a small object.
			DefaultTransform: withKind(scheme, cache.TransformStripManagedFields()),
			ByObject:         reports,
		},
		PprofBindAddress: o.PprofAddr,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if elect.events != nil {
		elect.events.recorder = mgr.GetEventRecorder("celaudit")
	}
	return mgr, nil
}

// withKind returns transform preceded by setting the apiVersion and kind of typed objects that lack them, so
// that the cache holds the same object whichever way it arrived: a typed object of a CRD comes from a LIST
// with its apiVersion and kind (the API server writes them on every custom resource and the decoder clears
// only the list's) and from a watch without them (the decoder clears the object's). The informers' consistency
// check (KUBE_WATCHLIST_INCONSISTENCY_DETECTOR) compares the two.
func withKind(scheme *k8sruntime.Scheme, transform toolscache.TransformFunc) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		if o, ok := obj.(k8sruntime.Object); ok && o.GetObjectKind().GroupVersionKind().Empty() {
			if gvk, err := apiutil.GVKForObject(o, scheme); err == nil {
				o.GetObjectKind().SetGroupVersionKind(gvk)
			}
		}
		return transform(obj)
	}
}

// checkReportCRDs fails unless the API server serves the report kinds of every API written. It runs before
// the manager is made, whose cache would otherwise fail on them with a bare "no matches for kind"; an
// informer of a kind not served would only log errors, and reports would never be written.
func checkReportCRDs(cfg *rest.Config, flag string, apis []reportAPI) error {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("creating HTTP client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return fmt.Errorf("creating REST mapper: %w", err)
	}
	for _, api := range apis {
		if err := checkInstalled(mapper, flag, api); err != nil {
			return err
		}
	}
	return nil
}

// auditParts are what reads and evaluates the audited objects, keeps their results and tells how far the
// audit got. newAudit makes them all at once; the steps after it only read them.
type auditParts struct {
	events   EventRecorder
	warnings *warnings
	metrics  *auditMetrics
	// notifier tells the report reconcilers which namespaces changed, and those waiting for the audit that
	// it may have settled.
	notifier  *Notifier
	store     *results.Store
	discovery *views.Discovery
	refresher *views.Refresher
	scan      *scan.Scanner
	startup   *startupGate
	progress  *auditProgress
	// auditPolicies says whether the AuditPolicy CRD is installed.
	auditPolicies bool
	// mutatingPolicies says whether MutatingAdmissionPolicies are audited (see mutatingPoliciesAudited).
	mutatingPolicies bool
	// failures logs the failed writes of every writer once per cause, and tells them when the API server
	// is back.
	failures *apiFailures
}

// newAudit makes the result store, discovery, the scanner that reads the audited resources and
// evaluates their objects, the start-up gate that holds it back until every policy is registered, and what
// answers how far the audit got. started is when the first audit began.
func newAudit(cfg *rest.Config, mgr ctrl.Manager, o Options, s settings, started time.Time) (*auditParts, error) {
	auditPolicies, err := served(mgr.GetRESTMapper(), auditv1alpha1.GroupVersion.WithKind("AuditPolicy"))
	if err != nil {
		return nil, err
	}
	if !auditPolicies {
		s.log.Info("The AuditPolicy CRD is not installed: AuditPolicies are not audited (install config/crd and restart celaudit)")
	}
	mutating, err := mutatingPoliciesAudited(mgr, o, s.log)
	if err != nil {
		return nil, err
	}
	events := mgr.GetEventRecorder("celaudit")
	m := newAuditMetrics()
	notifier := NewNotifier()
	store := results.NewStore(notifier.Notify, results.KeepPasses(slices.Contains(s.verdicts, audit.Pass)))
	members := forMembers(mgr, s.members)
	disc, refresher, err := newDiscovery(cfg, members, s.log)
	if err != nil {
		return nil, err
	}
	readErrors := &readErrorEvents{Reader: mgr.GetClient(), Recorder: events, Log: s.log.WithName("events")}
	sc, err := newScan(cfg, members, o, s.log, countingSink{Sink: store, metrics: m}, m, disc, readErrors, notifier)
	if err != nil {
		return nil, err
	}
	startup := newStartup(auditPolicies, mutating, sc, notifier, s.members)
	failures, err := newWriteFailures(mgr, s.log)
	if err != nil {
		return nil, err
	}
	return &auditParts{
		failures: failures,
		events:   events, warnings: &warnings{Recorder: events}, metrics: m, notifier: notifier, store: store,
		discovery: disc, refresher: refresher, scan: sc, startup: startup, auditPolicies: auditPolicies, mutatingPolicies: mutating,
		progress: newAuditProgress(startup, sc, notifier, started, m.firstAudit),
	}, nil
}

// newDiscovery returns the served resources, and what refreshes them (added to mgr).
func newDiscovery(cfg *rest.Config, mgr ctrl.Manager, log logr.Logger) (*views.Discovery, *views.Refresher, error) {
	client, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("creating discovery client: %w", err)
	}
	disc := views.NewDiscovery(client)
	refresher := &views.Refresher{Discovery: disc, Interval: 5 * time.Minute, Delay: 500 * time.Millisecond, Log: log.WithName("discovery")}
	if err := mgr.Add(refresher); err != nil {
		return nil, nil, fmt.Errorf("adding discovery refresher: %w", err)
	}
	return disc, refresher, nil
}

// newScan returns the scanner (added to mgr), which reads the audited resources, evaluates their objects
// and hands the results to sink. Its settling is a Recheck of the notifier: report writes held back for the
// first audit or a rescan go then, and readiness is decided.
func newScan(cfg *rest.Config, mgr ctrl.Manager, o Options, log logr.Logger, sink scan.Sink, m *auditMetrics,
	disc *views.Discovery, readErrors *readErrorEvents, notifier *Notifier) (*scan.Scanner, error) {
	reader, err := scan.NewClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("creating the audit client: %w", err)
	}
	sc := scan.NewScanner(timedClient{Client: reader, metrics: m, now: time.Now}, sink, log.WithName("scan"), scan.Options{
		PageSize:   o.PageSize,
		Workers:    o.Workers,
		Backoff:    o.ReadBackoff,
		MaxBackoff: o.MaxReadBackoff,
		// How to grant what is missing, with the wait after which the grant takes effect.
		ForbiddenHint: forbiddenHint(max(o.MaxReadBackoff, o.ReadBackoff)),
		Namespaced:    disc.Namespaced,
		KindFor:       disc.KindFor,
		Withheld:      o.withheldResources(),
		OnReadError:   readErrors.ReadError,
		OnSettled:     notifier.Recheck,
		OnShardMode:   m.shardModeChanged,
	})
	if err := mgr.Add(sc); err != nil {
		return nil, fmt.Errorf("adding the scanner: %w", err)
	}
	return sc, nil
}

// newStartup returns the gate that releases the scanner once every policy the cluster holds is registered:
// each resource is then listed once. Its opening is a Recheck of the notifier: with no policy covering any
// resource, the first audit is done as it opens. A member of a sharded audit releases the scanner once its
// layout is known too (see setupMembership).
func newStartup(auditPolicies, mutatingPolicies bool, sc *scan.Scanner, notifier *Notifier, members membership) *startupGate {
	sources := []audit.PolicySource{audit.SourceCRD, audit.SourceVAP}
	if auditPolicies {
		sources = append(sources, audit.SourceAuditPolicy)
	}
	if mutatingPolicies {
		sources = append(sources, audit.SourceMAP)
	}
	startup := newStartupGate(sources...)
	startup.OnOpen(func() { releaseMember(sc, startup, members) })
	startup.OnOpen(notifier.Recheck)
	return startup
}

// setupPolicies sets up a reconciler per kind of policy, each registering its compiled policies with the
// scanner, then readiness, which summarizes them, and the namespace reconciler. It returns readiness, and
// the leader's rollups of a sharded audit (nil when it is not sharded).
//
// In a sharded audit every member compiles and registers every policy (it audits its own namespaces
// against all of them) and keeps the readiness of its share; the leader adds the shares up.
func setupPolicies(cfg *rest.Config, mgr ctrl.Manager, o Options, s settings, a *auditParts) (*readiness, *shardRollups, error) {
	members := forMembers(mgr, s.members)
	if err := setupCRDs(members, o, a.scan, a.startup, a.refresher, a.warnings); err != nil {
		return nil, nil, err
	}
	vaps, err := setupVAPs(cfg, members, o, a.scan, a.discovery, a.startup, a.warnings, a.auditPolicies)
	if err != nil {
		return nil, nil, err
	}
	mutating, err := setupMAPs(cfg, members, o, a)
	if err != nil {
		return nil, nil, err
	}
	ready, err := setupReadiness(members, o, s, a.store, a.progress, vaps, a.events, a.notifier)
	if err != nil {
		return nil, nil, err
	}
	var rollups *shardRollups
	switch {
	case a.auditPolicies:
		// Every member audits each AuditPolicy, and the start-up gate of each waits for them; the leader
		// alone writes their status and registers their pairs.
		if rollups, err = setupAuditPolicies(mgr, o, s, vaps, ready, a); err != nil {
			return nil, nil, err
		}
	case s.members.sharded():
		return nil, nil, fmt.Errorf("a sharded audit needs the AuditPolicy and AuditShard CRDs (install config/crd)")
	}
	if err := setupNamespaces(members, o, a.scan, vaps, mutating); err != nil {
		return nil, nil, err
	}
	return ready, rollups, nil
}

// setupCRDs sets up the reconciler that compiles one policy per audited CRD.
func setupCRDs(mgr ctrl.Manager, o Options, registry policyRegistry, startup *startupGate, refresher *views.Refresher, warnings *warnings) error {
	excluded := o.excludedGroups()
	err := (&crdReconciler{
		Client:   mgr.GetClient(),
		Registry: registry,
		Compile:  engine.Compiler{}.CRD, // the apiserver's defaults, as every front end compiles
		Audited:  func(crd *apiextensionsv1.CustomResourceDefinition) bool { return !excluded[crd.Spec.Group] },
		Resync:   o.ResyncPeriod,
		Startup:  startup,
		Changed:  refresher.Trigger,
		Warnings: warnings,
	}).SetupWithManager(mgr, controllerOptions(o, o.Workers))
	if err != nil {
		return fmt.Errorf("setting up CRD controller: %w", err)
	}
	return nil
}

// setupVAPs sets up the reconciler that binds one policy per ValidatingAdmissionPolicy, and the params it
// reads; it returns the reconciler, through which AuditPolicies are registered too.
func setupVAPs(cfg *rest.Config, mgr ctrl.Manager, o Options, registry policyRegistry, disc *views.Discovery,
	startup *startupGate, warnings *warnings, auditPolicies bool) (*vapReconciler, error) {
	namespaces, err := newCachedNamespaces(mgr.GetCache())
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	r := &vapReconciler{
		Client:     mgr.GetClient(),
		Registry:   registry,
		Discovery:  disc,
		Namespaces: namespaces,
		Compile:    vapCompiler(o),
		Resync:     o.ResyncPeriod,
		Startup:    startup,
		Warnings:   warnings,
		// Only an AuditPolicy can own a policy, so that it is audited under the AuditPolicy's name.
		AuditPolicies: auditPolicies,
	}
	r.Params = views.NewParams(dyn, func() vap.ResourceResolver { return disc.Snapshot() }, r.paramsChanged, o.withheldParams())
	// A forbidden param informer retries with client-go's backoff, not celaudit's read backoff: no bound.
	r.Params.ForbiddenHint = forbiddenHint(0)
	if err := mgr.Add(r.Params); err != nil {
		return nil, fmt.Errorf("adding param source: %w", err)
	}
	if err := r.SetupWithManager(mgr, controllerOptions(o, o.Workers)); err != nil {
		return nil, fmt.Errorf("setting up ValidatingAdmissionPolicy controller: %w", err)
	}
	return r, nil
}

// vapCompiler returns the compiler of ValidatingAdmissionPolicies: the apiserver's defaults, as every front
// end compiles, held back first by the options' test hook when set.
func vapCompiler(o Options) func(audit.PolicyKey, *admissionregistrationv1.ValidatingAdmissionPolicy) *vap.Compiled {
	compile := engine.Compiler{}.VAPAs
	hold := o.beforeVAPCompile
	if hold == nil {
		return compile
	}
	return func(key audit.PolicyKey, p *admissionregistrationv1.ValidatingAdmissionPolicy) *vap.Compiled {
		hold(p.Name)
		return compile(key, p)
	}
}

// setupReadiness adds readiness, which keeps each policy's summary at the last complete audit (the per-policy
// metrics and the SafeToEnforce Events). The notifier wakes it when results change and when the audit may
// have settled.
func setupReadiness(mgr ctrl.Manager, o Options, s settings, store *results.Store, progress *auditProgress,
	vaps *vapReconciler, events EventRecorder, notifier *Notifier) (*readiness, error) {
	var sums summarizer = store
	if s.members.sharded() {
		// A member keeps its share; the leader adds the shares of AuditPolicies up into their status.
		sums = ownedSummaries{store: store, source: s.members.source}
	}
	r := newReadiness(sums, progress.Settled, mgr.GetClient(), events, o.ReadinessInterval, s.log.WithName("readiness"))
	r.Subresources = vaps.subresources
	r.Share = s.members.sharded()
	notifier.OnNotify(r.Changed)
	notifier.OnRecheck(r.Changed)
	if err := mgr.Add(r); err != nil {
		return nil, fmt.Errorf("adding readiness: %w", err)
	}
	return r, nil
}

// learnExemptions asks the API server who celaudit is (a SelfSubjectReview, which every authenticated user
// may create) and makes the exemptions of every AuditPolicy: the built-in ones, celaudit's own username and,
// for a ServiceAccount, its namespace, and the --exempt-* flags. Without its own identity an enforced
// AuditPolicy could deny celaudit's own writes, so start fails when the review does.
func learnExemptions(c client.Client, extra auditv1alpha1.Exemptions, log logr.Logger) (auditpolicy.Exemptions, error) {
	ctx, cancel := context.WithTimeout(context.Background(), selfReviewTimeout)
	defer cancel()
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return auditpolicy.Exemptions{}, fmt.Errorf("learning celaudit's own identity with a SelfSubjectReview (authentication.k8s.io/v1), "+
			"which the exemptions of every registered admission policy need: %w", err)
	}
	username := review.Status.UserInfo.Username
	if username == "" {
		return auditpolicy.Exemptions{}, fmt.Errorf("learning celaudit's own identity: the SelfSubjectReview names no user")
	}
	self := auditpolicy.IdentityOf(username)
	exemptions, err := auditpolicy.NewExemptions(self, extra)
	if err != nil {
		return auditpolicy.Exemptions{}, err
	}
	log.Info("Exempting celaudit's own identity from every registered admission policy", "user", self.Username, "namespace", self.Namespace)
	return exemptions, nil
}

// setupAuditPolicies sets up the reconciler that audits each AuditPolicy through vaps, registers its
// admission policy in Warn and Deny, with the exemptions learnExemptions makes, and writes its status from
// readiness. It returns the leader's rollups of a sharded audit, nil when it is not sharded.
func setupAuditPolicies(mgr ctrl.Manager, o Options, s settings, vaps *vapReconciler, ready *readiness, a *auditParts) (*shardRollups, error) {
	exemptions, err := learnExemptions(mgr.GetClient(), s.exemptions, s.log)
	if err != nil {
		return nil, err
	}
	r := &auditPolicyReconciler{
		Client:     mgr.GetClient(),
		Policies:   vaps,
		Summaries:  ready,
		Recheck:    ready.Changed,
		Events:     a.events,
		Warnings:   a.warnings,
		Manage:     o.ManageAdmissionPolicies,
		Exemptions: exemptions,
		Startup:    a.startup,
		Discovery:  a.discovery,
		Failures:   a.failures,
	}
	if s.members.sharded() {
		if err := setupShards(mgr, s, r); err != nil {
			return nil, err
		}
	}
	ready.OnChange(r.summariesChanged)
	ready.OnAudit(r.auditCompleted)
	if err := r.SetupWithManager(forMembers(mgr, s.members), controllerOptions(o, o.Workers)); err != nil {
		return nil, fmt.Errorf("setting up AuditPolicy controller: %w", err)
	}
	return r.Rollups, nil
}

// served reports whether the API server serves gvk.
func served(mapper meta.RESTMapper, gvk schema.GroupVersionKind) (bool, error) {
	_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("looking up %s: %w", gvk.Kind, err)
}

// setupNamespaces sets up the reconciler that rescans within a namespace whose labels changed.
func setupNamespaces(mgr ctrl.Manager, o Options, registry policyRegistry, vaps *vapReconciler, mutating *mapReconciler) error {
	dependents := vaps.namespaceDependents
	if mutating != nil {
		dependents = func() []audit.PolicyKey { return append(vaps.namespaceDependents(), mutating.namespaceDependents()...) }
	}
	err := (&namespaceReconciler{
		Client:     mgr.GetClient(),
		Registry:   registry,
		Dependents: dependents,
		Since:      time.Now(),
	}).SetupWithManager(mgr, controllerOptions(o, o.Workers))
	if err != nil {
		return fmt.Errorf("setting up namespace controller: %w", err)
	}
	return nil
}

// setupReports sets up the reports, in each API --report-api selects, written when the results change once
// the first audit is done; and the removal of celaudit's reports of an API no longer written. writes counts
// the writes.
//
// In a sharded audit every member writes the reports of the namespaces it owns, leader or not.
func setupReports(mgr ctrl.Manager, o Options, s settings, a *auditParts, writes *prometheus.CounterVec) error {
	mgr = forMembers(mgr, s.members)
	var onCurrent func(namespace string)
	retired, err := setupRetiredReports(mgr, o, s.reportAPIs, a, s.members)
	if err != nil {
		return err
	}
	if retired != nil {
		onCurrent = retired.reportsCurrent
	}
	failures := a.failures
	// One reconciler per API, each with its own gate: the reports of one API are restored, and its names
	// avoided, whatever becomes of the other's. They share the bound on writes in flight, and what is known
	// of failed writes: when the API server is back, each clears its backoff, then every namespace waiting
	// is enqueued.
	inFlight := make(chan struct{}, defaultWritesInFlight)
	for i, api := range s.reportAPIs {
		r := &ReportReconciler{
			Client:     mgr.GetClient(),
			APIReader:  mgr.GetAPIReader(),
			Events:     a.events,
			Results:    a.store,
			Ready:      a.progress.FirstAuditDone,
			Notifier:   a.notifier,
			Options:    report.Options{ListVerdicts: s.verdicts, MaxResultsPerReport: o.MaxResultsPerReport, MaxReportBytes: o.MaxReportBytes},
			Coalesce:   o.ReportCoalesce,
			Writes:     writes,
			Rescanning: func() bool { return !a.scan.Synced() || !s.members.scanning() },
			inFlight:   inFlight,
			api:        api,
			peers:      slices.Delete(slices.Clone(s.reportAPIs), i, i+1),
			onCurrent:  onCurrent,
			Failures:   failures,
			Shard:      s.members.source,
		}
		if set := s.members.statefulSet; set != nil {
			r.Refresh = set.Refresh
		}
		if err := r.SetupWithManager(mgr, controllerOptions(o, o.ReportWorkers)); err != nil {
			return fmt.Errorf("setting up %s controller: %w", api.name(), err)
		}
		failures.OnRecovered(r.gate.clearBackoff)
	}
	failures.OnRecovered(a.notifier.Recheck)
	return nil
}

// newWriteFailures returns what logs failed writes once per cause (added to mgr), which asks the API server
// whether it is ready (GET /readyz, which every client may read) while it is unreachable.
func newWriteFailures(mgr ctrl.Manager, log logr.Logger) (*apiFailures, error) {
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("creating the readiness probe's client: %w", err)
	}
	rc := dc.RESTClient()
	f := newAPIFailures(log.WithName("writes"), func(ctx context.Context) error {
		return rc.Get().AbsPath("/readyz").Do(ctx).Error()
	})
	if err := mgr.Add(f); err != nil {
		return nil, fmt.Errorf("adding the API server readiness probe: %w", err)
	}
	return f, nil
}

// setupRetiredReports registers the removal of celaudit's reports of the API --report-api no longer selects,
// when it selects one API and the cluster serves the other's CRDs; it returns nil otherwise.
func setupRetiredReports(mgr ctrl.Manager, o Options, written []reportAPI, a *auditParts, members membership) (*retiredReports, error) {
	api, ok := retiredAPI(written)
	if !ok {
		return nil, nil
	}
	namespaced, _ := api.kinds()
	if served, err := served(mgr.GetRESTMapper(), namespaced); err != nil || !served {
		return nil, err
	}
	r := newRetiredReports(api)
	r.Reader, r.Client = mgr.GetAPIReader(), mgr.GetClient()
	r.Ready, r.Namespaces, r.Enqueue = a.progress.FirstAuditDone, a.store.Namespaces, a.notifier.Notify
	r.PageSize = o.PageSize
	if members.sharded() {
		r.Owns = func(namespace string) bool {
			l, known := members.source.Layout()
			return known && l.OwnsNamespace(namespace)
		}
	}
	if err := r.SetupWithManager(mgr, a.notifier, controllerOptions(o, 1)); err != nil {
		return nil, fmt.Errorf("setting up the removal of retired %ss: %w", namespaced.Kind, err)
	}
	return r, nil
}

// addChecks adds health, and readiness once the first audit is done. A standby (elect, not yet elected) is
// ready: it audits once it leads, and a Deployment's rolling update waits for the new pod, a standby until
// the old one leaves, to be ready before it stops the old one. A member of a sharded audit audits whether it
// leads or not: it is ready once its layout is known and its first audit done.
func addChecks(mgr ctrl.Manager, progress *auditProgress, elect bool, members membership) error {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	err := mgr.AddReadyzCheck("audit", func(*http.Request) error {
		if members.sharded() {
			if err := memberReady(members); err != nil {
				return err
			}
		} else if elect && !elected(mgr) {
			return nil
		}
		if !progress.FirstAuditDone() {
			return fmt.Errorf("first audit in progress")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("adding audit readiness check: %w", err)
	}
	return nil
}

// elected reports whether mgr leads (or runs without leader election) yet.
func elected(mgr ctrl.Manager) bool {
	select {
	case <-mgr.Elected():
		return true
	default:
		return false
	}
}

// controllerOptions returns the options of a controller with workers workers.
func controllerOptions(o Options, workers int) func(*ctrl.Builder) *ctrl.Builder {
	return func(b *ctrl.Builder) *ctrl.Builder {
		return b.WithOptions(controller.Options{
			MaxConcurrentReconciles: max(1, workers),
			SkipNameValidation:      ptr.To(o.SkipControllerChecks),
		})
	}
}
