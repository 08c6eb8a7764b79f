// Package mutate tells which stored objects the cluster's MutatingAdmissionPolicies would change, and how: for
// each object, the patch from the stored object to the object as the policies would leave it on its next
// write, with the API server's own code.
//
// Nothing here re-implements admission: compilation (variables, matchConditions, JSONPatch and
// ApplyConfiguration mutations), matching of policies and bindings (rules, namespace and object selectors,
// matchPolicy), parameter collection, the patchers, the defaulting after each patch and reinvocation are the
// API server's (k8s.io/apiserver/pkg/admission/plugin/policy/mutating and .../generic), driven as the
// kube-apiserver drives them: built-in objects are admitted in their internal version through the
// kube-apiserver's scheme, custom resources as unstructured objects defaulted from their structural schema, and
// ApplyConfigurations are merged with the OpenAPI schemas the API server publishes (see NewTypes).
//
// Work is split by cost. Compile (milliseconds) compiles one policy generation and should be cached under
// CacheKey; NewSet binds the compiled policies to their bindings; Set.Evaluate (microseconds) judges one
// object.
//
// How a stored object is judged:
//   - A stored object meets the policies on its next write. It is judged as an UPDATE with object and
//     oldObject both the stored object when some policy and binding match UPDATE for it, and otherwise as a
//     CREATE of it (what a re-create would get) when some match CREATE; Outcome.Operation says which. On an
//     UPDATE, policies whose bindings match only CREATE do not apply, as on the API server.
//   - Several policies apply in order of name (the API server's order is unspecified: Go map order), then the
//     policies with reinvocationPolicy IfNeeded are reinvoked once when a later policy changed the object, as
//     the admission chain reinvokes them. Other mutating admission (webhooks, built-in plugins) is not run.
//   - There is no requesting user: request.userInfo is empty and every authorizer check has no opinion.
//
// Verdicts, per (object, policy) the API server would apply: pass when the policy leaves the object as it
// is (the object is already in shape), warn when it would change it (the object has drifted), with the
// fields and the RFC 6902 patch of the change, and error with the API server's message when the policy fails
// on it (a CEL error, the cost budget exceeded, a patch the API server refuses, params missing under
// parameterNotFoundAction Deny), whatever its failurePolicy. An object a policy's matchConditions exclude
// gets no result from it. Outcome.Patch turns the stored object into the object as all the policies leave it;
// when a policy with failurePolicy Fail errs, the API server would refuse the write and Outcome.Denied says
// so with its message.
//
// A Secret's data never reaches a result: in a Secret's patches, values under data, stringData and the
// last-applied-configuration annotation are replaced by audit.RedactionMarker, and the Secret's values, stored
// and patched, are redacted from every other value and message. So are the values of the Secrets that
// policies with paramKind Secret read as params, whatever the object. The one exception is Outcome.Object,
// the object itself as the policies leave it, for callers that validate it as the API server does after
// mutating admission (kubectl celaudit check): they must redact what they report on it.
package mutate
