package controllers

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/results"
	"github.com/celaudit/celaudit/internal/scan"
)

func TestResultCollector(t *testing.T) {
	store := results.NewStore(nil)
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	ref := func(uid string) audit.ObjectRef {
		return audit.ObjectRef{Namespace: "n", Name: uid, UID: ktypes.UID("u-" + uid)}
	}
	store.Set(audit.VAPKey("p"), results.ObjectKey{GVR: gvr, UID: "a"}, "n", []audit.Result{
		{Policy: "p", Verdict: audit.Pass, Resource: ref("a")},
		{Policy: "p", Verdict: audit.Pass, Resource: ref("a"), Properties: map[string]string{"binding": "b2"}},
	})
	store.Set(audit.VAPKey("p"), results.ObjectKey{GVR: gvr, UID: "b"}, "n", []audit.Result{
		{Policy: "p", Verdict: audit.Fail, Resource: ref("b")},
		{Policy: "p", Verdict: audit.Skip, Resource: ref("b")},
	})
	want := `
# HELP celaudit_audited_objects Objects that currently have results.
# TYPE celaudit_audited_objects gauge
celaudit_audited_objects 2
# HELP celaudit_results Current audit results by verdict.
# TYPE celaudit_results gauge
celaudit_results{result="error"} 0
celaudit_results{result="fail"} 1
celaudit_results{result="pass"} 2
celaudit_results{result="skip"} 1
celaudit_results{result="warn"} 0
`
	if err := testutil.CollectAndCompare(newResultCollector(store), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

func TestAuditMetricsCountEvaluations(t *testing.T) {
	m := newAuditMetrics()
	budget := "validation failed due to running out of cost budget, no further validation rules will be run"
	for _, e := range []struct {
		source audit.PolicySource
		res    []audit.Result
	}{
		{audit.SourceVAP, []audit.Result{{Verdict: audit.Pass}}},
		{audit.SourceVAP, []audit.Result{{Verdict: audit.Fail}, {Verdict: audit.Error, Message: "no such key: x"}}},
		{audit.SourceCRD, []audit.Result{{Verdict: audit.Error, Message: "spec: Invalid value: \"object\": " + budget}}},
		{audit.SourceAuditPolicy, []audit.Result{{Verdict: audit.Error, Message: "expression 'x' resulted in error: operation cancelled: actual cost limit exceeded"},
			{Verdict: audit.Error, Message: "another"}}},
		{audit.SourceAuditPolicy, []audit.Result{{Verdict: audit.Warn, Message: "mentions a cost limit exceeded but is no error"}}},
		{audit.SourceMAP, []audit.Result{{Verdict: audit.Warn, Message: "UPDATE would change metadata.labels.team"}}},
		{audit.SourceMAP, []audit.Result{{Verdict: audit.Error, Message: "policy 'm' with binding 'm' denied request: compilation failed"}}},
	} {
		m.evaluated(e.source, e.res)
	}
	want := `
# HELP celaudit_cost_budget_exceeded_total Evaluations stopped by the CEL cost budget of a request or the cost limit of one call, by source.
# TYPE celaudit_cost_budget_exceeded_total counter
celaudit_cost_budget_exceeded_total{source="auditpolicy"} 1
celaudit_cost_budget_exceeded_total{source="crd"} 1
celaudit_cost_budget_exceeded_total{source="map"} 0
celaudit_cost_budget_exceeded_total{source="vap"} 0
# HELP celaudit_evaluation_errors_total Evaluations that gave at least one error result, by source.
# TYPE celaudit_evaluation_errors_total counter
celaudit_evaluation_errors_total{source="auditpolicy"} 1
celaudit_evaluation_errors_total{source="crd"} 1
celaudit_evaluation_errors_total{source="map"} 1
celaudit_evaluation_errors_total{source="vap"} 1
# HELP celaudit_evaluations_total Evaluations of one policy on one object, by the policy's source (crd, vap, auditpolicy, map).
# TYPE celaudit_evaluations_total counter
celaudit_evaluations_total{source="auditpolicy"} 2
celaudit_evaluations_total{source="crd"} 1
celaudit_evaluations_total{source="map"} 2
celaudit_evaluations_total{source="vap"} 2
`
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.collectors()...)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"celaudit_cost_budget_exceeded_total", "celaudit_evaluation_errors_total", "celaudit_evaluations_total"); err != nil {
		t.Error(err)
	}
}

// A resource's read mode is one series at 1, the other at 0; no series when the audit is not sharded.
func TestShardModeMetric(t *testing.T) {
	m := newAuditMetrics()
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deps := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	m.shardModeChanged(cms, scan.ShardClient)
	m.shardModeChanged(deps, scan.ShardClient)
	m.shardModeChanged(deps, scan.ShardServer)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.collectors()...)
	want := `
# HELP celaudit_shard_read_mode 1 for how a sharded member reads each resource: mode server (the API server applies the shardSelector) or client (it receives every object and keeps its own).
# TYPE celaudit_shard_read_mode gauge
celaudit_shard_read_mode{mode="client",resource="configmaps"} 1
celaudit_shard_read_mode{mode="server",resource="configmaps"} 0
celaudit_shard_read_mode{mode="client",resource="deployments.apps"} 0
celaudit_shard_read_mode{mode="server",resource="deployments.apps"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "celaudit_shard_read_mode"); err != nil {
		t.Error(err)
	}
	m.shardModeChanged(cms, scan.ShardNone)
	m.shardModeChanged(deps, scan.ShardNone)
	if n := testutil.CollectAndCount(m.shardMode); n != 0 {
		t.Fatalf("%d series once the audit is not sharded, want 0", n)
	}
}
