// Package crdrules audits stored custom resources against the validation of their own
// CustomResourceDefinition: the OpenAPI v3 schema and every x-kubernetes-validations CEL rule.
//
// The verdicts and messages are the kube-apiserver's own. The package does not re-implement any
// check: it builds, per served version, the same schema validator and CEL validator the apiserver
// builds for the CRD (k8s.io/apiextensions-apiserver), runs them once over the whole object with the
// semantics of a CREATE (no old object, the per-object runtime cost budget) and turns every field
// error into a Finding whose Message is exactly the text the apiserver lists when it rejects the
// object.
//
// Upstream field errors do not name the rule that produced them, while a report needs one row per
// rule. Each CEL error is therefore attributed to a rule after the run, by walking the compiled rule
// tree alongside the object (the same walk the validator does) and matching the error's field path,
// type, value and detail against what each rule can produce, in the order the validator reports
// them. When several rules could have printed the same error (two messageExpressions, two equal
// messages), the rules are run a second time with messages that name them, and that run settles the
// choice. The attribution never changes a verdict or a message; it only names the rule.
//
// Two things a stored object cannot be judged on are reported as skips instead of passes:
// transition rules (rules using oldSelf without optionalOldSelf), which only run on UPDATE, and the
// CEL rules of an object whose schema errors stop the apiserver from running them.
//
// A stored object is validated as stored, status included: the status subresource makes a CREATE
// drop status, but the status endpoint validates the same rules over the whole object, so an audit
// that dropped status would miss stored violations.
package crdrules
