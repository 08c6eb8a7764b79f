package vap

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/celaudit/celaudit/internal/audit"
)

func TestEvaluateOperations(t *testing.T) {
	const (
		create  = admissionregistrationv1.Create
		update  = admissionregistrationv1.Update
		del     = admissionregistrationv1.Delete
		connect = admissionregistrationv1.Connect
		all     = admissionregistrationv1.OperationAll
	)
	const updateRule = "request.operation == 'UPDATE' && oldObject == object && request.options.kind == 'UpdateOptions'"
	updateProps := func(kv ...string) map[string]string {
		return props(append([]string{"binding", "b", "validationActions", "Deny", "operation", "UPDATE"}, kv...)...)
	}
	deleteSkip := row{"operations", audit.Skip, "the binding applies to this object only on DELETE; stored objects are audited as CREATE or UPDATE",
		props("binding", "b", "validationActions", "Deny", "operation", "DELETE")}
	runCases(t, []evalCase{{
		name:   "CREATE has no old object",
		policy: newPolicy("p", withRules(rule("apps", "v1", "deployments", create)), withValidation("oldObject == null && request.operation == 'CREATE'")),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", denyProps()}},
	}, {
		name:   "all operations are audited as CREATE",
		policy: newPolicy("p", withRules(rule("apps", "v1", "deployments", all)), withValidation("oldObject == null")),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", denyProps()}},
	}, {
		name:   "UPDATE-only policy is audited as an UPDATE of the object to itself",
		policy: newPolicy("p", withRules(rule("apps", "v1", "deployments", update)), withValidation(updateRule), withValidation(replicasRule, message("too many"))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[1]", audit.Fail, "too many", updateProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:   "UPDATE-only policy passes",
		policy: newPolicy("p", withRules(rule("apps", "v1", "deployments", update)), withValidation(updateRule)),
		obj:    newDeployment("prod", "d", 1),
		want:   []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", updateProps()}},
	}, {
		name:   "binding narrowing a policy to UPDATE",
		policy: newPolicy("p", withValidation(updateRule)),
		bindings: bindings{newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
			m.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{rule("*", "*", "*", update)}
		}))},
		obj:  newDeployment("prod", "d", 1),
		want: []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", updateProps()}},
	}, {
		name:   "CREATE rule for one name, UPDATE rule for others",
		policy: newPolicy("p", withRules(named(rule("apps", "v1", "deployments", create), "first"), rule("apps", "v1", "deployments", update)), withValidation(updateRule)),
		obj:    newDeployment("prod", "d", 1),
		want:   []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", updateProps()}},
	}, {
		name:   "DELETE-only policy is skipped",
		policy: newPolicy("p", withRules(rule("apps", "v1", "deployments", del)), withValidation(replicasRule)),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{deleteSkip},
	}, {
		name: "DELETE-only policy honours selectors",
		policy: newPolicy("p", withRules(rule("apps", "v1", "deployments", del)), withValidation(replicasRule),
			withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
				m.ObjectSelector = selector(map[string]string{"protected": "true"})
			})),
		obj:  newDeployment("prod", "d", 5),
		want: nil,
	}, {
		name:   "binding narrowing a policy to DELETE",
		policy: newPolicy("p", withRules(rule("apps", "v1", "deployments", create, del)), withValidation(replicasRule)),
		bindings: bindings{newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
			m.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{rule("*", "*", "*", del)}
		}))},
		obj:  newDeployment("prod", "d", 5),
		want: []row{deleteSkip},
	}, {
		name:   "CONNECT-only policy never applies to stored objects",
		policy: newPolicy("p", withRules(rule("", "v1", "pods/exec", connect), rule("", "v1", "pods", connect)), withValidation("false")),
		gvr:    podsGVR,
		obj:    newObject("v1", "Pod", "prod", "pod"),
		want:   nil,
	}})
}

func TestEvaluateUserDependent(t *testing.T) {
	skip := func(index, expression, why string) row {
		return row{"validations[" + index + "]", audit.Skip,
			"cannot be judged for a stored object: the expression depends on the requesting user (" + why + ")",
			denyProps("rule", expression)}
	}
	const (
		userRule = "request.userInfo.username == 'admin'"
		authRule = "authorizer.group('apps').resource('deployments').check('create').allowed()"
	)
	runCases(t, []evalCase{{
		name:   "request.userInfo is skipped, the other validations evaluated",
		policy: newPolicy("p", withValidation(userRule), withValidation(replicasRule, message("too many"))),
		obj:    newDeployment("prod", "d", 5),
		want: []row{
			skip("0", userRule, "request.userInfo"),
			{"validations[1]", audit.Fail, "too many", denyProps("rule", replicasRule, "reason", "Invalid")},
		},
	}, {
		name:   "skipped and passed",
		policy: newPolicy("p", withValidation(userRule), withValidation(replicasRule)),
		obj:    newDeployment("prod", "d", 1),
		want:   []row{skip("0", userRule, "request.userInfo"), {"validations", audit.Pass, "object satisfies the 1 validation evaluated", denyProps()}},
	}, {
		name:   "only skipped validations give no pass",
		policy: newPolicy("p", withValidation(authRule)),
		obj:    newDeployment("prod", "d", 1),
		want:   []row{skip("0", authRule, "authorizer")},
	}, {
		name:   "requestResource authorizer",
		policy: newPolicy("p", withValidation("authorizer.requestResource.check('update').allowed()")),
		obj:    newDeployment("prod", "d", 1),
		want:   []row{skip("0", "authorizer.requestResource.check('update').allowed()", "authorizer")},
	}, {
		name:   "index and optional syntax",
		policy: newPolicy("p", withValidation("request['userInfo'].username == 'a'"), withValidation("request.?userInfo.username.orValue('') == 'a'")),
		obj:    newDeployment("prod", "d", 1),
		want: []row{
			skip("0", "request['userInfo'].username == 'a'", "request.userInfo"),
			skip("1", "request.?userInfo.username.orValue('') == 'a'", "request.userInfo"),
		},
	}, {
		name: "through variables",
		policy: newPolicy("p",
			withVariable("isAdmin", "'system:masters' in request.userInfo.groups"),
			withVariable("mayCreate", "authorizer.group('apps').resource('deployments').check('create').allowed()"),
			withVariable("privileged", "variables.isAdmin || variables.mayCreate"),
			withVariable("replicas", "object.spec.replicas"),
			withValidation("variables.privileged || variables.replicas < 3"),
			withValidation("variables.replicas < 3", message("too many"))),
		obj: newDeployment("prod", "d", 5),
		want: []row{
			skip("0", "variables.privileged || variables.replicas < 3", "authorizer via variables.privileged, request.userInfo via variables.privileged"),
			{"validations[1]", audit.Fail, "too many", denyProps("rule", "variables.replicas < 3", "reason", "Invalid")},
		},
	}, {
		name:   "fields named userInfo elsewhere are judged",
		policy: newPolicy("p", withValidation("object.spec.userInfo == 'x'", message("bad user")), withValidation("has(request.name)")),
		obj:    newDeployment("prod", "d", 5, withField("y", "spec", "userInfo")),
		want:   []row{{"validations[0]", audit.Fail, "bad user", denyProps("rule", "object.spec.userInfo == 'x'", "reason", "Invalid")}},
	}, {
		name:   "matchConditions depending on the user",
		policy: newPolicy("p", withMatchCondition("big", "object.spec.replicas > 1"), withMatchCondition("not-admins", "!('system:masters' in request.userInfo.groups)"), withValidation(replicasRule)),
		obj:    newDeployment("prod", "d", 5),
		want: []row{{"matchConditions", audit.Skip,
			`cannot decide whether the policy applies to a stored object: matchConditions[1] "not-admins" depends on the requesting user (request.userInfo)`,
			denyProps()}},
	}, {
		name:   "messageExpression depending on the user falls back",
		policy: newPolicy("p", withValidation(replicasRule, message("too many"), messageExpression("request.userInfo.username + ' may not'"))),
		obj:    newDeployment("prod", "d", 5),
		want: []row{{"validations[0]", audit.Fail, "too many", denyProps("rule", replicasRule, "reason", "Invalid",
			"messageExpression", "not evaluated: depends on the requesting user (request.userInfo)")}},
	}, {
		name: "auditAnnotations depending on the user are left out",
		policy: newPolicy("p", withValidation(replicasRule),
			withAuditAnnotation("user", "request.userInfo.username"),
			withAuditAnnotation("replicas", "string(object.spec.replicas)")),
		obj:  newDeployment("prod", "d", 1),
		want: []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", denyProps("auditAnnotation.replicas", "1")}},
	}})
}
