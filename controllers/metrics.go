package controllers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/results"
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
		Help: "PolicyReport and ClusterPolicyReport writes, by operation (create, update, delete).",
	}, []string{"operation"})
}
