package vap

import (
	"errors"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/celaudit/celaudit/internal/audit"
)

const maxReplicasRule = "object.spec.replicas <= params.spec.maxReplicas"

func limitsPolicy(opts ...policyOption) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return newPolicy("p", append([]policyOption{
		withParamKind(limitsGVK),
		withValidation(maxReplicasRule, messageExpression("'at most ' + string(params.spec.maxReplicas)")),
	}, opts...)...)
}

func clusterLimitsPolicy(opts ...policyOption) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return newPolicy("p", append([]policyOption{
		withParamKind(clusterLimitsGVK),
		withValidation(maxReplicasRule, messageExpression("'at most ' + string(params.spec.maxReplicas)")),
	}, opts...)...)
}

func paramRefName(name string) func(*admissionregistrationv1.ParamRef) {
	return func(r *admissionregistrationv1.ParamRef) { r.Name = name }
}

func paramRefNamespace(namespace string) func(*admissionregistrationv1.ParamRef) {
	return func(r *admissionregistrationv1.ParamRef) { r.Namespace = namespace }
}

func paramRefSelector(s map[string]string) func(*admissionregistrationv1.ParamRef) {
	return func(r *admissionregistrationv1.ParamRef) { r.Selector = selector(s) }
}

func paramRef(opts ...func(*admissionregistrationv1.ParamRef)) bindingOption {
	return withParamRef(func(r *admissionregistrationv1.ParamRef) {
		for _, o := range opts {
			o(r)
		}
	})
}

func maxFail(msg, param string) row {
	return row{"validations[0]", audit.Fail, msg, denyProps("rule", maxReplicasRule, "reason", "Invalid", "param", param)}
}

func TestEvaluateParams(t *testing.T) {
	deny, allow := admissionregistrationv1.DenyAction, admissionregistrationv1.AllowAction
	runCases(t, []evalCase{{
		name:     "cluster-scoped param by name",
		policy:   clusterLimitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("global"), notFound(deny)))},
		obj:      newDeployment("prod", "d", 5),
		want:     []row{maxFail("at most 4", "global")},
	}, {
		name:     "namespaced param by name in the object's namespace",
		policy:   limitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("strict"), notFound(deny)))},
		obj:      newDeployment("prod", "d", 5),
		want:     []row{maxFail("at most 2", "prod/strict")},
	}, {
		name:     "namespaced param by name in another namespace",
		policy:   limitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("strict"), paramRefNamespace("dev"), notFound(deny)))},
		obj:      newDeployment("prod", "d", 5),
		want:     []row{maxFail("at most 1", "dev/strict")},
	}, {
		name:     "params by selector are each evaluated, in order",
		policy:   limitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefSelector(map[string]string{"tier": "limits"}), notFound(deny)))},
		obj:      newDeployment("prod", "d", 5),
		want: []row{
			{"validations", audit.Pass, "object satisfies the 1 validation evaluated", denyProps("param", "prod/loose")},
			maxFail("at most 2", "prod/strict"),
		},
	}, {
		name:     "empty selector selects every param of the namespace",
		policy:   limitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(func(r *admissionregistrationv1.ParamRef) { r.Selector = selector(nil) }, paramRefNamespace("dev"), notFound(deny)))},
		obj:      newDeployment("prod", "d", 5),
		want:     []row{maxFail("at most 1", "dev/strict")},
	}, {
		name:     "missing param, parameterNotFoundAction Deny",
		policy:   limitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("absent"), notFound(deny)))},
		obj:      newDeployment("prod", "d", 5),
		want: []row{{"configuration", audit.Error, "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
			denyProps("failurePolicy", "Fail")}},
	}, {
		name:     "no param selected, parameterNotFoundAction Deny",
		policy:   limitsPolicy(withFailurePolicy(admissionregistrationv1.Ignore)),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefSelector(map[string]string{"tier": "none"}), notFound(deny)))},
		obj:      newDeployment("prod", "d", 5),
		want: []row{{"configuration", audit.Error, "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
			denyProps("failurePolicy", "Ignore")}},
	}, {
		name:     "missing param, parameterNotFoundAction Allow: the policy does not apply",
		policy:   limitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("absent"), notFound(allow)))},
		obj:      newDeployment("prod", "d", 5),
		want:     nil,
	}, {
		name:     "no param selected, parameterNotFoundAction Allow",
		policy:   limitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefSelector(map[string]string{"tier": "none"}), notFound(allow)))},
		obj:      newDeployment("prod", "d", 5),
		want:     nil,
	}, {
		name:     "param kind not installed",
		policy:   limitsPolicy(withParamKind(limitsGVK.GroupVersion().WithKind("Missing"))),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("strict"), notFound(deny)))},
		obj:      newDeployment("prod", "d", 5),
		want: []row{{"configuration", audit.Error, "failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=Missing'",
			props("failurePolicy", "Fail")}},
	}, {
		name:    "param kind not installed, unbound policy",
		policy:  limitsPolicy(withParamKind(limitsGVK.GroupVersion().WithKind("Missing"))),
		unbound: true,
		obj:     newDeployment("prod", "d", 5),
		want: []row{{"configuration", audit.Error, "failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=Missing'",
			props("failurePolicy", "Fail")}},
	}, {
		name:   "paramKind without paramRef evaluates with null params",
		policy: limitsPolicy(withValidation("params == null", message("params set"))),
		obj:    newDeployment("prod", "d", 1),
		want: []row{{"validations[0]", audit.Error, "expression 'object.spec.replicas <= params.spec.maxReplicas' resulted in error: no such key: spec",
			denyProps("rule", maxReplicasRule, "failurePolicy", "Fail")}},
	}, {
		name:    "unbound policy with paramKind evaluates with null params",
		policy:  newPolicy("p", withParamKind(limitsGVK), withValidation("params == null", message("params set"))),
		unbound: true,
		obj:     newDeployment("prod", "d", 1),
		want:    []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", props("validationActions", "Audit", "operation", "CREATE")}},
	}, {
		name: "typed param without TypeMeta",
		policy: newPolicy("p", withParamKind(configMapGVK),
			withValidation("object.spec.replicas <= int(params.data.maxReplicas)",
				messageExpression("params.apiVersion + ' ' + params.kind + ' ' + params.metadata.name + ' allows ' + params.data.maxReplicas"))),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("limits"), notFound(deny)))},
		obj:      newDeployment("prod", "d", 5),
		want: []row{{"validations[0]", audit.Fail, "v1 ConfigMap limits allows 3",
			denyProps("rule", "object.spec.replicas <= int(params.data.maxReplicas)", "reason", "Invalid", "param", "prod/limits")}},
	}, {
		name:     "params in matchConditions and auditAnnotations",
		policy:   limitsPolicy(withMatchCondition("strict", "params.spec.maxReplicas < 5"), withAuditAnnotation("max", "string(params.spec.maxReplicas)")),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefSelector(map[string]string{"tier": "limits"}), notFound(deny)))},
		obj:      newDeployment("prod", "d", 5),
		want: []row{
			{"validations[0]", audit.Fail, "at most 2",
				denyProps("rule", maxReplicasRule, "reason", "Invalid", "param", "prod/strict", "auditAnnotation.max", "2")}},
	}, {
		name:     "a param the matchConditions exclude gives no result, the others a pass",
		policy:   limitsPolicy(withMatchCondition("strict", "params.spec.maxReplicas < 5")),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefSelector(map[string]string{"tier": "limits"}), notFound(deny)))},
		obj:      newDeployment("prod", "d", 1),
		want:     []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", denyProps("param", "prod/strict")}},
	}, {
		name:     "every param excluded: no result, not even a pass",
		policy:   limitsPolicy(withMatchCondition("huge", "params.spec.maxReplicas > 100")),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefSelector(map[string]string{"tier": "limits"}), notFound(deny)))},
		obj:      newDeployment("prod", "d", 1),
		want:     nil,
	}, {
		name:     "namespaced paramRef without namespace for a cluster-scoped object",
		policy:   limitsPolicy(withRules(rule("", "v1", "nodes"))),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("strict"), notFound(deny)))},
		gvr:      nodesGVR,
		obj:      newObject("v1", "Node", "", "n"),
		want: []row{{"configuration", audit.Error, "failed to configure binding: cannot use namespaced paramRef in policy binding that matches cluster-scoped resources",
			denyProps("failurePolicy", "Fail")}},
	}, {
		name:     "namespace in the paramRef of a cluster-scoped paramKind",
		policy:   clusterLimitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("global"), paramRefNamespace("prod"), notFound(deny)))},
		obj:      newDeployment("prod", "d", 5),
		want: []row{{"configuration", audit.Error, "failed to configure binding: paramRef.namespace must not be provided for a cluster-scoped `paramKind`",
			denyProps("failurePolicy", "Fail")}},
	}, {
		name:     "param source failure",
		policy:   limitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("strict"), notFound(deny)))},
		deps:     func(d *Deps) { d.Params = failingParams{err: errors.New("cache not ready")} },
		obj:      newDeployment("prod", "d", 5),
		want:     []row{{"configuration", audit.Error, "failed to configure binding: cache not ready", denyProps("failurePolicy", "Fail")}},
	}, {
		name:     "no param source",
		policy:   limitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("strict"), notFound(deny)))},
		deps:     func(d *Deps) { d.Params = nil },
		obj:      newDeployment("prod", "d", 5),
		want:     []row{{"configuration", audit.Error, "failed to configure binding: no param source configured", denyProps("failurePolicy", "Fail")}},
	}, {
		name:     "a panicking param source is an error, not a crash",
		policy:   limitsPolicy(),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("strict"), notFound(deny))), newBinding("c", "p")},
		deps:     func(d *Deps) { d.Params = panickingParams{} },
		obj:      newDeployment("prod", "d", 5),
		want: []row{
			{"internal", audit.Error, "internal error evaluating the policy: boom", denyProps("failurePolicy", "Fail")},
			{"validations[0]", audit.Error, "expression 'object.spec.replicas <= params.spec.maxReplicas' resulted in error: no such key: spec",
				props("binding", "c", "validationActions", "Deny", "operation", "CREATE", "rule", maxReplicasRule, "failurePolicy", "Fail")},
		},
	}})
}
