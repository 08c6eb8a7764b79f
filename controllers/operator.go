package controllers

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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

// NewOperator wires celaudit: the manager, the result store, the scanner and every reconciler.
func NewOperator(cfg *rest.Config, o Options) (*Operator, error) {
	w := &wiring{opts: o, cfg: rest.CopyConfig(cfg), created: time.Now(), metrics: newAuditMetrics()}
	w.register(w.metrics.collectors()...)
	for _, step := range []func() error{
		w.newManager,         // the manager and its cache: policies, params, namespaces and celaudit's own reports
		w.newStore,           // the current results, and what tells the report reconciler which namespaces changed
		w.newScan,            // discovery, and the scanner that reads audited resources and evaluates their objects
		w.setupCRDs,          // one compiled policy per audited CRD
		w.setupVAPs,          // one bound policy per ValidatingAdmissionPolicy, its params and bindings
		w.learnExemptions,    // who celaudit is, and what no pair it registers may deny
		w.setupAuditPolicies, // one bound policy per AuditPolicy, and its admission policy in Warn and Deny
		w.setupNamespaces,    // rescans within a namespace whose labels changed
		w.setupReports,       // the reports, in each API --report-api selects, written when the results change
		w.setupReadiness,     // each policy's summary at the last complete audit: metrics and readiness Events
		w.addChecks,          // health, and readiness once the first audit is done
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return &Operator{Manager: w.mgr, Settled: w.settled, Results: w.store, readiness: w.readiness, collectors: w.collectors}, nil
}

// register registers the operator's metrics. Registration fails when several operators share a process
// (tests); the registry then keeps the first one's.
func (w *wiring) register(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = metrics.Registry.Register(c)
		w.collectors = append(w.collectors, c)
	}
}

// wiring holds the parts of an operator while NewOperator connects them.
type wiring struct {
	opts     Options
	cfg      *rest.Config
	log      logr.Logger
	verdicts []audit.Verdict
	mgr      ctrl.Manager
	events   EventRecorder
	compiler engine.Compiler // the apiserver's defaults, as every front end compiles

	store   *results.Store
	metrics *auditMetrics
	// collectors are the metrics registered so far.
	collectors []prometheus.Collector
	created    time.Time // when NewOperator began: the start of the first audit's duration
	notifier   *Notifier
	readiness  *readiness
	warnings   *warnings
	discovery  *views.Discovery
	refresher  *views.Refresher
	scan       *scan.Scanner
	startup    *startupGate
	vaps       *vapReconciler
	audited    atomic.Bool // the first audit is done
	// auditPolicies says whether the AuditPolicy CRD is installed.
	auditPolicies bool
	// exemptions are what every AuditPolicy's audit and registered pair leave out.
	exemptions auditpolicy.Exemptions
	// reportAPIs are the APIs reports are written in (--report-api).
	reportAPIs []reportAPI
}

func (w *wiring) newManager() error {
	var err error
	if w.verdicts, err = w.opts.verdicts(); err != nil {
		return err
	}
	if w.reportAPIs, err = parseReportAPIs(w.opts.ReportAPI); err != nil {
		return err
	}
	if err := w.checkReportCRDs(); err != nil {
		return err
	}
	// Only our own reports are cached, of the APIs written: other tools' reports can be large and are none
	// of our business. Ours are kept compacted: a digest of their content instead of their results.
	reports := map[client.Object]cache.ByObject{}
	for _, api := range w.reportAPIs {
		for _, o := range api.objects() {
			reports[o] = cache.ByObject{Label: labels.SelectorFromSet(labels.Set(managedSelector())), Transform: report.ForCache}
		}
	}
	w.cfg.QPS, w.cfg.Burst = w.opts.QPS, w.opts.Burst
	w.log = w.opts.Logger
	if w.log.GetSink() == nil {
		w.log = ctrl.Log
	}
	w.mgr, err = ctrl.NewManager(w.cfg, ctrl.Options{
		Scheme:                  Scheme(),
		Logger:                  w.log,
		Metrics:                 w.opts.metricsServer(),
		HealthProbeBindAddress:  w.opts.ProbeAddr,
		LeaderElection:          w.opts.LeaderElect,
		LeaderElectionID:        "celaudit.celaudit.io",
		LeaderElectionNamespace: w.opts.LeaderElectionNS,
		Cache: cache.Options{
			// Nothing celaudit reads from its cache (policies, params, namespaces, its own reports) needs
			// managedFields, often the largest part of a small object.
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject:         reports,
		},
		PprofBindAddress: w.opts.PprofAddr,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	w.events = w.mgr.GetEventRecorder("celaudit")
	w.warnings = &warnings{Recorder: w.events}
	if w.auditPolicies, err = served(w.mgr.GetRESTMapper(), auditv1alpha1.GroupVersion.WithKind("AuditPolicy")); err != nil {
		return err
	}
	if !w.auditPolicies {
		w.log.Info("The AuditPolicy CRD is not installed: AuditPolicies are not audited (install config/crd and restart celaudit)")
	}
	return nil
}

// checkReportCRDs fails unless the API server serves the report kinds of every API written. It runs before
// the manager is made, whose cache would otherwise fail on them with a bare "no matches for kind"; an
// informer of a kind not served would only log errors, and reports would never be written.
func (w *wiring) checkReportCRDs() error {
	httpClient, err := rest.HTTPClientFor(w.cfg)
	if err != nil {
		return fmt.Errorf("creating HTTP client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(w.cfg, httpClient)
	if err != nil {
		return fmt.Errorf("creating REST mapper: %w", err)
	}
	for _, api := range w.reportAPIs {
		if err := checkInstalled(mapper, w.opts.ReportAPI, api); err != nil {
			return err
		}
	}
	return nil
}

func (w *wiring) newStore() error {
	w.notifier = NewNotifier()
	w.readiness = newReadiness(nil, w.settled, w.mgr.GetClient(), w.events, w.opts.ReadinessInterval, w.log.WithName("readiness"))
	// The report reconciler and readiness both follow the results.
	changed := func(namespace string) {
		w.notifier.Notify(namespace)
		w.readiness.Changed()
	}
	w.store = results.NewStore(changed, results.KeepPasses(slices.Contains(w.verdicts, audit.Pass)))
	w.readiness.Results = w.store
	return nil
}

func (w *wiring) newScan() error {
	disc, err := discovery.NewDiscoveryClientForConfig(w.cfg)
	if err != nil {
		return fmt.Errorf("creating discovery client: %w", err)
	}
	w.discovery = views.NewDiscovery(disc)
	w.refresher = &views.Refresher{Discovery: w.discovery, Interval: 5 * time.Minute, Delay: 500 * time.Millisecond, Log: w.log.WithName("discovery")}
	if err := w.mgr.Add(w.refresher); err != nil {
		return fmt.Errorf("adding discovery refresher: %w", err)
	}
	reader, err := scan.NewClient(w.cfg, w.mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("creating the audit client: %w", err)
	}
	readErrors := &readErrorEvents{Reader: w.mgr.GetClient(), Recorder: w.events, Log: w.log.WithName("events")}
	timed := timedClient{Client: reader, metrics: w.metrics, now: time.Now}
	w.scan = scan.NewScanner(timed, countingSink{Sink: w.store, metrics: w.metrics}, w.log.WithName("scan"), scan.Options{
		PageSize:    w.opts.PageSize,
		Workers:     w.opts.Workers,
		Backoff:     w.opts.ReadBackoff,
		Namespaced:  w.discovery.Namespaced,
		KindFor:     w.discovery.KindFor,
		Withheld:    w.opts.withheldResources(),
		OnReadError: readErrors.ReadError,
		OnSettled: func() {
			w.firstAuditDone() // records the first audit's duration
			// Report writes held back for the first audit or a rescan go once it ends.
			w.notifier.Recheck()
			// Readiness is decided at complete audits.
			w.readiness.Changed()
		},
	})
	if err := w.mgr.Add(w.scan); err != nil {
		return fmt.Errorf("adding the scanner: %w", err)
	}
	// Reading starts once every policy the cluster holds is registered: each resource is then listed once.
	sources := []audit.PolicySource{audit.SourceCRD, audit.SourceVAP}
	if w.auditPolicies {
		sources = append(sources, audit.SourceAuditPolicy)
	}
	w.startup = newStartupGate(sources...)
	w.startup.OnOpen(w.scan.Release)
	// With no policy covering any resource, the first audit is done as the gate opens.
	w.startup.OnOpen(w.notifier.Recheck)
	w.startup.OnOpen(w.readiness.Changed)
	return nil
}

func (w *wiring) setupCRDs() error {
	excluded := w.opts.excludedGroups()
	err := (&crdReconciler{
		Client:   w.mgr.GetClient(),
		Registry: w.scan,
		Compile:  w.compiler.CRD,
		Audited:  func(crd *apiextensionsv1.CustomResourceDefinition) bool { return !excluded[crd.Spec.Group] },
		Resync:   w.opts.ResyncPeriod,
		Startup:  w.startup,
		Changed:  w.refresher.Trigger,
		Warnings: w.warnings,
	}).SetupWithManager(w.mgr, w.controllerOptions(w.opts.Workers))
	if err != nil {
		return fmt.Errorf("setting up CRD controller: %w", err)
	}
	return nil
}

func (w *wiring) setupVAPs() error {
	namespaces, err := newCachedNamespaces(w.mgr.GetCache())
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfigAndClient(w.cfg, w.mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("creating dynamic client: %w", err)
	}
	compile := w.compiler.VAPAs
	if hold := w.opts.beforeVAPCompile; hold != nil {
		compile = func(key audit.PolicyKey, p *admissionregistrationv1.ValidatingAdmissionPolicy) *vap.Compiled {
			hold(p.Name)
			return w.compiler.VAPAs(key, p)
		}
	}
	w.vaps = &vapReconciler{
		Client:     w.mgr.GetClient(),
		Registry:   w.scan,
		Discovery:  w.discovery,
		Namespaces: namespaces,
		Compile:    compile,
		Resync:     w.opts.ResyncPeriod,
		Startup:    w.startup,
		Warnings:   w.warnings,
		// Only an AuditPolicy can own a policy, so that it is audited under the AuditPolicy's name.
		AuditPolicies: w.auditPolicies,
	}
	w.readiness.Subresources = w.vaps.subresources
	w.vaps.Params = views.NewParams(dyn, func() vap.ResourceResolver { return w.discovery.Snapshot() }, w.vaps.paramsChanged, w.opts.withheldParams())
	if err := w.mgr.Add(w.vaps.Params); err != nil {
		return fmt.Errorf("adding param source: %w", err)
	}
	if err := w.vaps.SetupWithManager(w.mgr, w.controllerOptions(w.opts.Workers)); err != nil {
		return fmt.Errorf("setting up ValidatingAdmissionPolicy controller: %w", err)
	}
	return nil
}

func (w *wiring) setupAuditPolicies() error {
	if !w.auditPolicies {
		return nil
	}
	r := &auditPolicyReconciler{
		Client:     w.mgr.GetClient(),
		Policies:   w.vaps,
		Summaries:  w.readiness,
		Recheck:    w.readiness.Changed,
		Events:     w.events,
		Warnings:   w.warnings,
		Manage:     w.opts.ManageAdmissionPolicies,
		Exemptions: w.exemptions,
		Startup:    w.startup,
		Discovery:  w.discovery,
	}
	w.readiness.OnChange(r.summariesChanged)
	w.readiness.OnAudit(r.auditCompleted)
	if err := r.SetupWithManager(w.mgr, w.controllerOptions(w.opts.Workers)); err != nil {
		return fmt.Errorf("setting up AuditPolicy controller: %w", err)
	}
	return nil
}

// learnExemptions asks the API server who celaudit is (a SelfSubjectReview, which every authenticated user
// may create) and makes the exemptions of every AuditPolicy: the built-in ones, celaudit's own username and,
// for a ServiceAccount, its namespace, and the --exempt-* flags. Without its own identity an enforced
// AuditPolicy could deny celaudit's own writes, so start fails when the review does.
func (w *wiring) learnExemptions() error {
	extra, err := w.opts.exemptions()
	if err != nil {
		return err
	}
	if !w.auditPolicies {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), selfReviewTimeout)
	defer cancel()
	review := &authenticationv1.SelfSubjectReview{}
	if err := w.mgr.GetClient().Create(ctx, review); err != nil {
		return fmt.Errorf("learning celaudit's own identity with a SelfSubjectReview (authentication.k8s.io/v1), "+
			"which the exemptions of every registered admission policy need: %w", err)
	}
	username := review.Status.UserInfo.Username
	if username == "" {
		return fmt.Errorf("learning celaudit's own identity: the SelfSubjectReview names no user")
	}
	self := auditpolicy.IdentityOf(username)
	if w.exemptions, err = auditpolicy.NewExemptions(self, extra); err != nil {
		return err
	}
	w.log.Info("Exempting celaudit's own identity from every registered admission policy", "user", self.Username, "namespace", self.Namespace)
	return nil
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

func (w *wiring) setupNamespaces() error {
	err := (&namespaceReconciler{
		Client:     w.mgr.GetClient(),
		Registry:   w.scan,
		Dependents: w.vaps.namespaceDependents,
		Since:      time.Now(),
	}).SetupWithManager(w.mgr, w.controllerOptions(w.opts.Workers))
	if err != nil {
		return fmt.Errorf("setting up namespace controller: %w", err)
	}
	return nil
}

// settled reports whether every policy is registered and the scan has read everything they cover.
func (w *wiring) settled() bool { return w.startup.Open() && w.scan.Synced() }

// firstAuditDone reports whether the first audit is done. Only the first audit holds reports back: later
// rescans (a policy edit, a resync) update results in place, and holding every namespace's writes until
// they finish would delay unrelated changes.
func (w *wiring) firstAuditDone() bool {
	if w.audited.Load() {
		return true
	}
	if w.settled() {
		if w.audited.CompareAndSwap(false, true) {
			w.metrics.firstAudit.Set(time.Since(w.created).Seconds())
		}
		return true
	}
	return false
}

func (w *wiring) setupReports() error {
	writes := newReportWrites()
	w.register(writes, newResultCollector(w.store))
	o := w.opts
	// One reconciler per API, each with its own gate: the reports of one API are restored, and its names
	// avoided, whatever becomes of the other's. They share the bound on writes in flight.
	inFlight := make(chan struct{}, defaultWritesInFlight)
	var onCurrent func(namespace string)
	retired, err := w.setupRetiredReports()
	if err != nil {
		return err
	}
	if retired != nil {
		onCurrent = retired.reportsCurrent
	}
	for i, api := range w.reportAPIs {
		r := &ReportReconciler{
			Client:     w.mgr.GetClient(),
			APIReader:  w.mgr.GetAPIReader(),
			Events:     w.events,
			Results:    w.store,
			Ready:      w.firstAuditDone,
			Notifier:   w.notifier,
			Options:    report.Options{ListVerdicts: w.verdicts, MaxResultsPerReport: o.MaxResultsPerReport, MaxReportBytes: o.MaxReportBytes},
			Coalesce:   o.ReportCoalesce,
			Writes:     writes,
			Rescanning: func() bool { return !w.scan.Synced() },
			inFlight:   inFlight,
			api:        api,
			peers:      slices.Delete(slices.Clone(w.reportAPIs), i, i+1),
			onCurrent:  onCurrent,
		}
		if err := r.SetupWithManager(w.mgr, w.controllerOptions(o.ReportWorkers)); err != nil {
			return fmt.Errorf("setting up %s controller: %w", api.name(), err)
		}
	}
	return nil
}

// setupRetiredReports registers the removal of celaudit's reports of the API --report-api no longer selects,
// when it selects one API and the cluster serves the other's CRDs; it returns nil otherwise.
func (w *wiring) setupRetiredReports() (*retiredReports, error) {
	api, ok := retiredAPI(w.reportAPIs)
	if !ok {
		return nil, nil
	}
	namespaced, _ := api.kinds()
	if served, err := served(w.mgr.GetRESTMapper(), namespaced); err != nil || !served {
		return nil, err
	}
	r := newRetiredReports(api)
	r.Reader, r.Client = w.mgr.GetAPIReader(), w.mgr.GetClient()
	r.Ready, r.Namespaces, r.Enqueue = w.firstAuditDone, w.store.Namespaces, w.notifier.Notify
	r.PageSize = w.opts.PageSize
	if err := r.SetupWithManager(w.mgr, w.notifier, w.controllerOptions(1)); err != nil {
		return nil, fmt.Errorf("setting up the removal of retired %ss: %w", namespaced.Kind, err)
	}
	return r, nil
}

func (w *wiring) setupReadiness() error {
	if w.opts.ReadinessInterval <= 0 {
		return fmt.Errorf("--readiness-interval must be positive, got %s", w.opts.ReadinessInterval)
	}
	w.register(newReadinessCollector(w.readiness))
	if err := w.mgr.Add(w.readiness); err != nil {
		return fmt.Errorf("adding readiness: %w", err)
	}
	return nil
}

func (w *wiring) addChecks() error {
	if err := w.mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := w.mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	err := w.mgr.AddReadyzCheck("audit", func(*http.Request) error {
		if !w.firstAuditDone() {
			return fmt.Errorf("first audit in progress")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("adding audit readiness check: %w", err)
	}
	return nil
}

func (w *wiring) controllerOptions(workers int) func(*ctrl.Builder) *ctrl.Builder {
	return func(b *ctrl.Builder) *ctrl.Builder {
		return b.WithOptions(controller.Options{
			MaxConcurrentReconciles: max(1, workers),
			SkipNameValidation:      ptr.To(w.opts.SkipControllerChecks),
		})
	}
}
