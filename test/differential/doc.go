// Package differential checks celaudit's verdicts and messages against a real kube-apiserver.
//
// CRD validation (crd_test.go, fixtures under testdata/crd): for any stored custom resource, the audit
// decides what the apiserver decides when the object is created, with the same field error text. Every
// fixture object is tried under its CustomResourceDefinition (a server-side dry run, then a real create of
// what the apiserver accepts), evaluated with internal/crdrules, and the two answers are compared object by
// object: rejected exactly when the audit fails or errors, and the apiserver's field errors equal to the
// audit's.
//
// ValidatingAdmissionPolicies (vap_test.go, fixtures under testdata/vap): objects are stored first, then a
// policy and its bindings are created, as in a real rollout. Each stored object is evaluated with
// internal/vap against the live cluster's discovery, namespaces and params, and compared with the
// apiserver's answer to a server-side dry-run create (or update) of the same object: denied exactly when the
// audit predicts a denial, with the same denial text, reason and warnings. For Secrets the audit carries the
// message the apiserver falls back to instead of the output of a messageExpression that may read the
// Secret's data, stringData or annotations, by design, and the test checks exactly that fallback; other
// messageExpressions are compared like any message.
//
// Pod templates (podtemplates_test.go): workloads of every kind are stored, then Pod policies annotated to
// expand pod templates; the audit of each stored workload's template is compared with the apiserver's answer
// to a server-side dry-run create of the Pod made from that template, as vap_test.go compares objects.
//
// The apiserver's own limits are part of the prediction: it drops a warning whose text holds a control
// character (a line break), and where the audit withholds the details of an expression's runtime error on a
// Secret (internal/vap/withhold.go), the apiserver's text is compared up to those details.
//
// AuditPolicies (auditpolicy_test.go, the same fixtures): each file's policy is converted with
// internal/auditpolicy into one AuditPolicy per binding, with the enforcement of the binding's
// validationActions, and one unbound. Each is created in the apiserver (validated by the AuditPolicy CRD's
// schema and rules) and must convert back to the policy and binding it came from; the engine's audit of
// each stored AuditPolicy must give, for every stored object, the results of the policy for that binding.
// The apiserver's answers are then predicted from the AuditPolicies' results twice: under the file's own
// policy and bindings, each AuditPolicy standing for its binding; and under the pairs celaudit registers for
// the AuditPolicies (auditpolicy.Owned, an Audit one registered as Warn so that its decisions show) in their
// place.
//
// Front ends (frontends_test.go, testdata/frontends): one cluster, given as a file and stored in the API
// server, is evaluated by the operator (informer views), by a one-shot evaluation of the live cluster (live
// views, paginated reads) and from the file alone (file views); all three must give the same results.
//
// Fixture files say what the apiserver is expected to answer for each object, so a wrong fixture is caught
// as well as a wrong audit.
package differential
