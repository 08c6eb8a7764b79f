// Package report turns audit results into the PolicyReports (wgpolicyk8s.io/v1alpha2) celaudit publishes,
// and decides which report objects to create, update and delete.
//
// Everything here is a pure function of its inputs: the complete set of current results, the timestamps of
// the results already published, the current time and the options (which carry how each namespace is split
// now). The controller gathers those inputs,
// calls BuildCounted and Diff, and writes only what Diff returns, so an unchanged cluster costs no API writes.
//
// Reports are grouped per namespace (PolicyReport) and for cluster-scoped objects (ClusterPolicyReport),
// and split into numbered chunks so that no report approaches the API server's object size limit or lists more
// results than configured. Objects are assigned to chunks by the hash of their UID, so a change to one object
// rewrites one chunk: the API server's cost of a write grows with the size of the object written. A chunk
// whose name a report celaudit does not own already holds is published under an alternative of that name
// (celaudit.1 for celaudit, celaudit-3.1 for celaudit-3), and reports celaudit does not own are never written.
package report
