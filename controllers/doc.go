// Package controllers is celaudit's operator: one reconciler per kind it watches, and NewOperator, which
// wires them to a manager.
//
//   - crdReconciler compiles each audited CustomResourceDefinition's validation into a policy;
//   - vapReconciler compiles each ValidatingAdmissionPolicy once and binds it to its bindings, the served
//     resources and its params;
//   - auditPolicyReconciler audits each AuditPolicy as the ValidatingAdmissionPolicy and binding it stands
//     for (registered through the vapReconciler under the AuditPolicy's key), registers that pair with the
//     API server in Warn and Deny, writes the AuditPolicy's status from readiness and promotes it;
//   - namespaceReconciler rescans, within one namespace, the policies a namespace's labels matter to;
//   - ReportReconciler writes each namespace's PolicyReports (and the ClusterPolicyReports) from the
//     current results, only when they changed.
//
// Beside them, readiness keeps each policy's summary at the last complete audit, for the per-policy metrics
// and the SafeToEnforce Events (readiness.go), and warnings records the Warning Events of policies, CRDs and
// bindings that cannot be audited as written (warnings.go). reasons.go declares the reason of every Event and
// AuditPolicy condition.
//
// The reconcilers gather inputs from the manager's cache and hand them to the pure packages under
// internal/: compilation and evaluation in internal/engine (the path every front end shares), the
// cluster views policies read in internal/views, reading and evaluating audited objects in internal/scan,
// results in internal/results and report building in internal/report. Options (options.go) are the
// operator's settings and flags; NewOperator (operator.go) makes each part in the order of their
// dependencies, each step taking what it needs and returning what it makes.
package controllers
