// Package results holds the current audit results in memory, indexed by namespace so that the report for one
// namespace can be rebuilt without touching the others, and tells its owner which namespaces changed.
//
// Results are replaced per (policy, resource, object): a rule source hands over the complete result list of
// one object for one policy, and the store keeps it only if it differs from what it had, so re-evaluating an
// unchanged object never marks its report dirty.
package results
