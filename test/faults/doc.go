// Package faults runs celaudit through the faults a cluster really has, each against a control plane of its
// own (the API server is stopped and etcd compacted under it), as its shipped ServiceAccount:
//
//   - etcd compaction: a LIST continue token and the watch's resourceVersion expire; the relists stay
//     paginated (compaction_test.go);
//   - the API server stopped and started again during the first audit (restart_test.go);
//   - the operator killed with SIGKILL during the first audit and started again (sigkill_test.go);
//   - the API server unreachable for a while: report writes back off, each cause is logged once, and the
//     writes go as soon as it is back (unreachable_test.go).
//
// Each scenario ends with the reports celaudit wrote through the fault compared, result by result, with
// those of a fresh audit of the final state (envtestutil.AssertFreshAuditAgrees).
package faults
