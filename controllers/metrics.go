package controllers

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/listjson"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/scan"
)

// resultCollector exposes the current results, computed from the store at scrape time so that nothing is
// counted twice or goes stale.
type resultCollector struct {
	store   *results.Store
	results *prometheus.Desc
	objects *prometheus.Desc
}

func newResultCollector(store *results.Store) *resultCollector {
	return &resultCollector{
		store:   store,
		results: prometheus.NewDesc("celaudit_results", "Current audit results by verdict.", []string{"result"}, nil),
		objects: prometheus.NewDesc("celaudit_audited_objects", "Objects that currently have results.", nil, nil),
	}
}

func (c *resultCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.results
	ch <- c.objects
}

func (c *resultCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.store.Counts()
	for _, v := range []audit.Verdict{audit.Pass, audit.Fail, audit.Warn, audit.Error, audit.Skip} {
		ch <- prometheus.MustNewConstMetric(c.results, prometheus.GaugeValue, float64(counts[v]), string(v))
	}
	ch <- prometheus.MustNewConstMetric(c.objects, prometheus.GaugeValue, float64(c.store.Len()))
}

// reportWrites counts the report writes celaudit makes, by operation: the measure of how quiet it is.
func newReportWrites() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "celaudit_report_writes_total",
		Help: "Report writes (PolicyReports and ClusterPolicyReports, OpenReports' Reports and ClusterReports), by operation (create, update, delete).",
	}, []string{"operation"})
}

// labelSource is the label of metrics by policy source (crd, vap, auditpolicy, map).
const labelSource = "source"

// costMarkers are the texts by which the API server's evaluators say that an evaluation ran out of CEL cost:
// the budget of a whole request, or the limit of one call (apiextensions-apiserver schema/cel/validation.go,
// apiserver admission/plugin/cel, cel-go's "actual cost limit exceeded").
var costMarkers = []string{"running out of cost budget", "cost limit exceeded", "call cost exceeds limit"}

// auditMetrics are the counters and timings of the audit itself: how much it evaluates, how often an
// evaluation fails or runs out of cost, and what reading the audited resources costs the API server.
type auditMetrics struct {
	evaluations  *prometheus.CounterVec
	errors       *prometheus.CounterVec
	costExceeded *prometheus.CounterVec
	lists        *prometheus.HistogramVec
	firstAudit   prometheus.Gauge
	shardMode    *prometheus.GaugeVec
	// bySource holds each source's counters, resolved once: counting an evaluation is then an atomic add.
	bySource map[audit.PolicySource]sourceCounters
}

type sourceCounters struct{ evaluations, errors, costExceeded prometheus.Counter }

func newAuditMetrics() *auditMetrics {
	m := &auditMetrics{
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "celaudit_evaluations_total",
			Help: "Evaluations of one policy on one object, by the policy's source (crd, vap, auditpolicy, map).",
		}, []string{labelSource}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "celaudit_evaluation_errors_total",
			Help: "Evaluations that gave at least one error result, by source.",
		}, []string{labelSource}),
		costExceeded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "celaudit_cost_budget_exceeded_total",
			Help: "Evaluations stopped by the CEL cost budget of a request or the cost limit of one call, by source.",
		}, []string{labelSource}),
		lists: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "celaudit_list_duration_seconds",
			Help:    "Duration of each LIST page request for an audited resource, by resource (group/resource) and outcome.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"resource", "outcome"}),
		firstAudit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "celaudit_first_audit_duration_seconds",
			Help: "Time from the operator's start to the end of its first complete audit; 0 until then.",
		}),
		shardMode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "celaudit_shard_read_mode",
			Help: "1 for how a sharded member reads each resource: mode server (the API server applies the shardSelector) or client (it receives every object and keeps its own).",
		}, []string{"resource", "mode"}),
		bySource: map[audit.PolicySource]sourceCounters{},
	}
	for _, s := range []audit.PolicySource{audit.SourceCRD, audit.SourceVAP, audit.SourceAuditPolicy, audit.SourceMAP} {
		m.bySource[s] = m.countersOf(s)
	}
	return m
}

func (m *auditMetrics) countersOf(s audit.PolicySource) sourceCounters {
	return sourceCounters{
		evaluations:  m.evaluations.WithLabelValues(string(s)),
		errors:       m.errors.WithLabelValues(string(s)),
		costExceeded: m.costExceeded.WithLabelValues(string(s)),
	}
}

func (m *auditMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.evaluations, m.errors, m.costExceeded, m.lists, m.firstAudit, m.shardMode}
}

// shardModeChanged records how a resource is read (scan.Options.OnShardMode): the series of its mode is 1,
// the other 0, and neither exists when the audit is not sharded.
func (m *auditMetrics) shardModeChanged(gvr schema.GroupVersionResource, mode scan.ShardMode) {
	resource := gvr.GroupResource().String()
	for _, other := range []scan.ShardMode{scan.ShardServer, scan.ShardClient} {
		switch mode {
		case scan.ShardNone:
			m.shardMode.DeleteLabelValues(resource, string(other))
		case other:
			m.shardMode.WithLabelValues(resource, string(other)).Set(1)
		default:
			m.shardMode.WithLabelValues(resource, string(other)).Set(0)
		}
	}
}

// evaluated counts one evaluation of a policy of source with its results.
func (m *auditMetrics) evaluated(source audit.PolicySource, res []audit.Result) {
	c, ok := m.bySource[source]
	if !ok {
		c = m.countersOf(source)
	}
	c.evaluations.Inc()
	failed, cost := false, false
	for i := range res {
		if res[i].Verdict != audit.Error {
			continue
		}
		failed = true
		for _, marker := range costMarkers {
			if strings.Contains(res[i].Message, marker) {
				cost = true
			}
		}
	}
	if failed {
		c.errors.Inc()
	}
	if cost {
		c.costExceeded.Inc()
	}
}

// countingSink counts each evaluation the scan hands over before storing its results.
type countingSink struct {
	scan.Sink
	metrics *auditMetrics
}

func (s countingSink) Set(policy audit.PolicyKey, obj results.ObjectKey, namespace string, res []audit.Result) bool {
	s.metrics.evaluated(policy.Source, res)
	return s.Sink.Set(policy, obj, namespace, res)
}

// timedClient times the scan's LIST requests.
type timedClient struct {
	scan.Client
	metrics *auditMetrics
	now     func() time.Time
}

func (c timedClient) List(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*listjson.Page, error) {
	start := c.now()
	page, err := c.Client.List(ctx, gvr, namespace, opts)
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	c.metrics.lists.WithLabelValues(gvr.GroupResource().String(), outcome).Observe(c.now().Sub(start).Seconds())
	return page, err
}
