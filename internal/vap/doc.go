// Package vap audits stored objects against ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1) and
// their bindings, deciding as kube-apiserver would have decided had the object been submitted now.
//
// Nothing here re-implements admission semantics: compilation (variables, matchConditions, validations,
// messageExpressions, auditAnnotations), resource matching (rules, selectors, matchPolicy), parameter collection
// and validation are the apiserver's own packages (k8s.io/apiserver/pkg/admission/plugin/policy/...), driven by
// thin adapters over the consumer's namespace and parameter caches and discovery.
//
// Work is split by cost. CompilePolicy (milliseconds) compiles the CEL of one policy generation and should be
// cached under CacheKey; Compiled.Bind (microseconds) applies the current bindings and discovery and yields the
// audit.Policy that is evaluated per object. Namespaces and params are read at evaluation time.
//
// How a stored object is judged:
//   - It is audited as a CREATE of the object (oldObject null). A binding that matches only UPDATE is audited
//     as an UPDATE with oldObject equal to the object. A binding that matches the object only for DELETE gets
//     one skip result; CONNECT applies to subresources only and never to stored objects.
//   - The object is read in the version the policy names (Policy.Resources) and evaluated as a request for
//     that version, so no conversion happens here. It is evaluated as stored: status and system metadata
//     are not reset as the apiserver's create strategy would reset them.
//   - There is no requesting user. Validations whose expression (directly or through variables) reads
//     request.userInfo or the authorizer are reported as skip; a binding whose matchConditions do gets one
//     skip, since whether the policy applies cannot be decided; a messageExpression that does is not evaluated
//     (the apiserver's fallback message is used and the property messageExpression says why); such
//     auditAnnotations are not evaluated. request.dryRun is false and request.options holds empty
//     CreateOptions/UpdateOptions.
//   - Nothing computed from a Secret's data, stringData or annotations reaches a result. Each expression is
//     inspected when the policy is compiled; for a Secret (and for params of kind Secret), a
//     messageExpression or audit annotation that may read those fields is not evaluated, and the error of an
//     expression that may read them keeps the apiserver's form with its details withheld. Validations are
//     evaluated whatever they read. The scanner then redacts the Secret's values from every result.
//   - An object a matchCondition excludes yields no result: the apiserver admits it without evaluating the
//     validations and says nothing, and a result per excluded object would be noise that grows with the
//     cluster. The same holds per param: a (binding, param) pair whose matchConditions are false yields
//     nothing, so an object excluded for every pair has no result at all, not even a pass, and is not
//     counted as matched. A matchCondition that errors is what the apiserver makes of it: an error under
//     failurePolicy Fail, an exclusion under Ignore.
//   - Other errors are reported whatever the failurePolicy (recorded in the failurePolicy property). A
//     binding whose paramRef finds no params under parameterNotFoundAction Allow does not apply, as in the
//     apiserver, and yields no results.
//   - A policy without bindings is not enforced by the apiserver; it is audited as if bound with empty
//     matchResources and validationActions [Audit], so its failures are warnings.
//
// Pod rules on workload templates: a policy annotated celaudit.io/expand-pod-templates: "true" also
// evaluates the pod templates of Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs and CronJobs as the
// Pods their controllers would create, exactly as it evaluates a stored Pod, and reports the results on the
// workload with the property podTemplate. A template that breaks a Pod rule is then seen when the workload is
// stored, not Pod by Pod.
//
// Result mapping, per (object, policy, binding, param, validation): a failed validation is fail when the
// binding's validationActions include Deny and warn otherwise; an evaluation or configuration error is error
// whatever the failurePolicy (recorded in the failurePolicy property; with Ignore the apiserver would admit),
// except a matchCondition's error under Ignore, which excludes the object; when nothing failed, one pass per
// (object, policy, binding, param) the matchConditions do not exclude. Messages are exactly the <message> part
// of the apiserver's denial `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>' with
// binding '<binding>' denied request: <message>`.
package vap
