// Package report turns audit results into the PolicyReports (wgpolicyk8s.io/v1alpha2) celaudit publishes,
// and decides which report objects to create, update and delete.
//
// Everything here is a pure function of its inputs: the complete set of current results, the timestamps of
// the results already published, the current time and the options. The controller gathers those inputs,
// calls Build and Diff, and writes only what Diff returns, so an unchanged cluster costs no API writes.
//
// Reports are grouped per namespace (PolicyReport) and for cluster-scoped objects (ClusterPolicyReport),
// and split into numbered chunks so that no report approaches the API server's object size limit.
package report
