package vap

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
)

type bindings = []*admissionregistrationv1.ValidatingAdmissionPolicyBinding

// evalCase evaluates one object against one policy and its bindings.
type evalCase struct {
	name     string
	policy   *admissionregistrationv1.ValidatingAdmissionPolicy
	bindings bindings // nil: a single binding "b" of the policy with validationActions [Deny]
	unbound  bool     // evaluate the policy without bindings
	deps     func(*Deps)
	gvr      schema.GroupVersionResource // apps/v1 deployments when empty
	obj      *unstructured.Unstructured
	want     []row
}

func (c evalCase) run(t *testing.T) {
	t.Helper()
	deps := testDeps(t)
	if c.deps != nil {
		c.deps(&deps)
	}
	bs := c.bindings
	if bs == nil && !c.unbound {
		bs = bindings{newBinding("b", c.policy.Name)}
	}
	gvr := c.gvr
	if gvr.Empty() {
		gvr = deploymentsGVR
	}
	p := CompilePolicy(c.policy, Options{}).Bind(bs, deps)
	got := p.Evaluate(defaultTestContext, gvr, c.obj)
	for _, r := range got {
		if r.Policy != c.policy.Name || r.Resource != audit.RefOf(c.obj) || r.Category != DefaultCategory || r.Severity != audit.SeverityMedium {
			t.Errorf("result %+v: want policy %q, resource %+v, default category and severity", r, c.policy.Name, audit.RefOf(c.obj))
		}
	}
	diffRows(t, got, c.want)
}

func runCases(t *testing.T, cases []evalCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, c.run)
	}
}

const replicasRule = "object.spec.replicas < 3"

func TestEvaluateMessages(t *testing.T) {
	long := strings.Repeat("x", 5*1024+1)
	runCases(t, []evalCase{{
		name:   "message",
		policy: newPolicy("p", withValidation(replicasRule, message("too many replicas"))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[0]", audit.Fail, "too many replicas", denyProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:   "message is trimmed",
		policy: newPolicy("p", withValidation(replicasRule, message("  too many replicas \t"))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[0]", audit.Fail, "too many replicas", denyProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name: "messageExpression wins over message",
		policy: newPolicy("p", withValidation(replicasRule, message("static"),
			messageExpression("'replicas is ' + string(object.spec.replicas) + ', at most 2'"))),
		obj:  newDeployment("prod", "d", 5),
		want: []row{{"validations[0]", audit.Fail, "replicas is 5, at most 2", denyProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:   "messageExpression is trimmed",
		policy: newPolicy("p", withValidation(replicasRule, messageExpression("'  replicas ' + string(object.spec.replicas) + ' '"))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[0]", audit.Fail, "replicas 5", denyProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:   "blank messageExpression falls back to message",
		policy: newPolicy("p", withValidation(replicasRule, message("static"), messageExpression("'   '"))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[0]", audit.Fail, "static", denyProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:   "multi-line messageExpression falls back to message",
		policy: newPolicy("p", withValidation(replicasRule, message("static"), messageExpression(`'line one\nline two'`))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[0]", audit.Fail, "static", denyProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:   "messageExpression over 5 KiB falls back to message",
		policy: newPolicy("p", withValidation(replicasRule, message("static"), messageExpression("object.spec.note"))),
		obj:    newDeployment("prod", "d", 5, withField(long, "spec", "note")),
		want:   []row{{"validations[0]", audit.Fail, "static", denyProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:   "failing messageExpression falls back to message",
		policy: newPolicy("p", withValidation(replicasRule, message("static"), messageExpression("object.spec.missing"))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[0]", audit.Fail, "static", denyProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:   "messageExpression that does not compile falls back to message",
		policy: newPolicy("p", withValidation(replicasRule, message("static"), messageExpression("'a' +"))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[0]", audit.Fail, "static", denyProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:   "failing messageExpression without message falls back to the default text",
		policy: newPolicy("p", withValidation(replicasRule, messageExpression("object.spec.missing"))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[0]", audit.Fail, "failed expression: object.spec.replicas < 3", denyProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:   "default text from the trimmed expression",
		policy: newPolicy("p", withValidation("  object.spec.replicas < 3\n")),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[0]", audit.Fail, "failed expression: object.spec.replicas < 3", denyProps("rule", "  object.spec.replicas < 3\n", "reason", "Invalid")}},
	}, {
		name:   "reason",
		policy: newPolicy("p", withValidation(replicasRule, message("no"), reason(metav1.StatusReasonForbidden))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[0]", audit.Fail, "no", denyProps("rule", replicasRule, "reason", "Forbidden")}},
	}})
}

func TestEvaluateValidations(t *testing.T) {
	runCases(t, []evalCase{{
		name:   "pass",
		policy: newPolicy("p", withValidation(replicasRule)),
		obj:    newDeployment("prod", "d", 1),
		want:   []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", denyProps()}},
	}, {
		name:   "policy without validations passes",
		policy: newPolicy("p"),
		obj:    newDeployment("prod", "d", 1),
		want:   []row{{"validations", audit.Pass, "object passes: the policy has no validations", denyProps()}},
	}, {
		name: "every failed validation is reported, in order",
		policy: newPolicy("p",
			withValidation("object.spec.replicas > 0", message("zero")),
			withValidation(replicasRule, message("too many")),
			withValidation("object.metadata.name.startsWith('app-')", message("bad name"))),
		obj: newDeployment("prod", "d", 5),
		want: []row{
			{"validations[1]", audit.Fail, "too many", denyProps("rule", replicasRule, "reason", "Invalid")},
			{"validations[2]", audit.Fail, "bad name", denyProps("rule", "object.metadata.name.startsWith('app-')", "reason", "Invalid")},
		},
	}, {
		name: "variables",
		policy: newPolicy("p",
			withVariable("replicas", "object.spec.replicas"),
			withVariable("limit", "variables.replicas > 10 ? 100 : 3"),
			withValidation("variables.replicas < variables.limit", messageExpression("'limit ' + string(variables.limit)"))),
		obj:  newDeployment("prod", "d", 5),
		want: []row{{"validations[0]", audit.Fail, "limit 3", denyProps("rule", "variables.replicas < variables.limit", "reason", "Invalid")}},
	}, {
		name:   "namespaceObject",
		policy: newPolicy("p", withValidation("namespaceObject.metadata.labels.env == 'dev'", messageExpression("'namespace ' + namespaceObject.metadata.name + ' of ' + namespaceObject.metadata.annotations.team"))),
		obj:    newDeployment("prod", "d", 5),
		want:   []row{{"validations[0]", audit.Fail, "namespace prod of prod-team", denyProps("rule", "namespaceObject.metadata.labels.env == 'dev'", "reason", "Invalid")}},
	}, {
		name: "the request is a CREATE of the stored object",
		policy: newPolicy("p", withValidation(`request.operation == 'CREATE' && oldObject == null && request.name == 'd' &&
			request.namespace == 'prod' && request.dryRun == false && request.options.kind == 'CreateOptions' &&
			request.kind.kind == 'Deployment' && request.userInfo.username == ''`)),
		obj: newDeployment("prod", "d", 5),
		want: []row{{"validations[0]", audit.Skip, "cannot be judged for a stored object: the expression depends on the requesting user (request.userInfo)", denyProps("rule", `request.operation == 'CREATE' && oldObject == null && request.name == 'd' &&
			request.namespace == 'prod' && request.dryRun == false && request.options.kind == 'CreateOptions' &&
			request.kind.kind == 'Deployment' && request.userInfo.username == ''`)}},
	}, {
		name: "request fields of a CREATE",
		policy: newPolicy("p", withValidation(`request.operation == 'CREATE' && oldObject == null && request.name == 'd' &&
			request.namespace == 'prod' && request.dryRun == false && request.options.kind == 'CreateOptions' &&
			request.kind.kind == 'Deployment' && request.resource.resource == 'deployments' && !has(request.subResource)`)),
		obj:  newDeployment("prod", "d", 5),
		want: []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", denyProps()}},
	}})
}

func TestEvaluateErrors(t *testing.T) {
	const missing = "object.spec.missing > 1"
	runCases(t, []evalCase{{
		name:   "runtime error under failurePolicy Fail",
		policy: newPolicy("p", withValidation(missing), withValidation(replicasRule)),
		obj:    newDeployment("prod", "d", 1),
		want: []row{{"validations[0]", audit.Error, "expression 'object.spec.missing > 1' resulted in error: no such key: missing",
			denyProps("rule", missing, "failurePolicy", "Fail")}},
	}, {
		name:   "runtime error under failurePolicy Ignore",
		policy: newPolicy("p", withValidation(missing), withFailurePolicy(admissionregistrationv1.Ignore)),
		obj:    newDeployment("prod", "d", 1),
		want: []row{{"validations[0]", audit.Error, "expression 'object.spec.missing > 1' resulted in error: no such key: missing",
			denyProps("rule", missing, "failurePolicy", "Ignore")}},
	}, {
		name:   "validation that does not compile",
		policy: newPolicy("p", withValidation("object.spec.replicas <"), withValidation(replicasRule, message("too many"))),
		obj:    newDeployment("prod", "d", 5),
		want: []row{
			{"validations[0]", audit.Error, "compilation error: compilation failed: ERROR: <input>:1:23: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | object.spec.replicas <\n | ......................^",
				denyProps("rule", "object.spec.replicas <", "failurePolicy", "Fail")},
			{"validations[1]", audit.Fail, "too many", denyProps("rule", replicasRule, "reason", "Invalid")},
		},
	}, {
		name:   "validation of the wrong type",
		policy: newPolicy("p", withValidation("'a' + 1")),
		obj:    newDeployment("prod", "d", 5),
		want: []row{{"validations[0]", audit.Error, "compilation error: compilation failed: ERROR: <input>:1:5: found no matching overload for '_+_' applied to '(string, int)'\n | 'a' + 1\n | ....^",
			denyProps("rule", "'a' + 1", "failurePolicy", "Fail")}},
	}, {
		name:   "variable that does not compile",
		policy: newPolicy("p", withVariable("bad", "object.spec.replicas +"), withValidation("variables.bad > 1")),
		obj:    newDeployment("prod", "d", 5),
		want: []row{{"validations[0]", audit.Error, "expression 'variables.bad > 1' resulted in error: composited variable \"bad\" fails to compile: compilation failed: ERROR: <input>:1:23: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | object.spec.replicas +\n | ......................^",
			denyProps("rule", "variables.bad > 1", "failurePolicy", "Fail")}},
	}, {
		name:   "policy without matchConstraints applies to nothing",
		policy: newPolicy("p", withValidation(replicasRule), func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Spec.MatchConstraints = nil }),
		obj:    newDeployment("prod", "d", 5),
		want:   nil,
	}})
}

func TestEvaluateActions(t *testing.T) {
	policy := newPolicy("p", withValidation(replicasRule, message("too many")))
	failProps := func(actions string, kv ...string) map[string]string {
		return props(append([]string{"binding", "b", "validationActions", actions, "operation", "CREATE", "rule", replicasRule, "reason", "Invalid"}, kv...)...)
	}
	runCases(t, []evalCase{{
		name:     "Deny fails",
		policy:   policy,
		bindings: bindings{newBinding("b", "p", withActions(admissionregistrationv1.Deny))},
		obj:      newDeployment("prod", "d", 5),
		want:     []row{{"validations[0]", audit.Fail, "too many", failProps("Deny")}},
	}, {
		name:     "Warn warns",
		policy:   policy,
		bindings: bindings{newBinding("b", "p", withActions(admissionregistrationv1.Warn))},
		obj:      newDeployment("prod", "d", 5),
		want:     []row{{"validations[0]", audit.Warn, "too many", failProps("Warn")}},
	}, {
		name:     "Audit warns",
		policy:   policy,
		bindings: bindings{newBinding("b", "p", withActions(admissionregistrationv1.Audit))},
		obj:      newDeployment("prod", "d", 5),
		want:     []row{{"validations[0]", audit.Warn, "too many", failProps("Audit")}},
	}, {
		name:     "Warn and Audit warn",
		policy:   policy,
		bindings: bindings{newBinding("b", "p", withActions(admissionregistrationv1.Warn, admissionregistrationv1.Audit))},
		obj:      newDeployment("prod", "d", 5),
		want:     []row{{"validations[0]", audit.Warn, "too many", failProps("Warn,Audit")}},
	}, {
		name:     "Deny and Audit fail",
		policy:   policy,
		bindings: bindings{newBinding("b", "p", withActions(admissionregistrationv1.Deny, admissionregistrationv1.Audit))},
		obj:      newDeployment("prod", "d", 5),
		want:     []row{{"validations[0]", audit.Fail, "too many", failProps("Deny,Audit")}},
	}, {
		name:   "each binding gives its own results, ordered by name",
		policy: policy,
		bindings: bindings{
			newBinding("z-warn", "p", withActions(admissionregistrationv1.Warn)),
			newBinding("a-deny", "p"),
		},
		obj: newDeployment("prod", "d", 5),
		want: []row{
			{"validations[0]", audit.Fail, "too many", props("binding", "a-deny", "validationActions", "Deny", "operation", "CREATE", "rule", replicasRule, "reason", "Invalid")},
			{"validations[0]", audit.Warn, "too many", props("binding", "z-warn", "validationActions", "Warn", "operation", "CREATE", "rule", replicasRule, "reason", "Invalid")},
		},
	}, {
		name:    "unbound policy is audited with validationActions Audit",
		policy:  policy,
		unbound: true,
		obj:     newDeployment("prod", "d", 5),
		want: []row{{"validations[0]", audit.Warn, "too many",
			props("validationActions", "Audit", "operation", "CREATE", "rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:    "unbound policy passes",
		policy:  policy,
		unbound: true,
		obj:     newDeployment("prod", "d", 1),
		want:    []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", props("validationActions", "Audit", "operation", "CREATE")}},
	}, {
		name:     "bindings of other policies are ignored",
		policy:   policy,
		bindings: bindings{newBinding("other", "q")},
		obj:      newDeployment("prod", "d", 5),
		want: []row{{"validations[0]", audit.Warn, "too many",
			props("validationActions", "Audit", "operation", "CREATE", "rule", replicasRule, "reason", "Invalid")}},
	}})
}

func TestEvaluateMatchConditions(t *testing.T) {
	const onlyApps = "object.metadata.name.startsWith('app-')"
	runCases(t, []evalCase{{
		name:   "matching conditions evaluate the validations",
		policy: newPolicy("p", withMatchCondition("apps", onlyApps), withMatchCondition("big", "object.spec.replicas > 1"), withValidation(replicasRule)),
		obj:    newDeployment("prod", "app-d", 5),
		want:   []row{{"validations[0]", audit.Fail, "failed expression: object.spec.replicas < 3", denyProps("rule", replicasRule, "reason", "Invalid")}},
	}, {
		name:   "a false condition excludes the object: no result, as the API server says nothing",
		policy: newPolicy("p", withMatchCondition("apps", onlyApps), withValidation(replicasRule)),
		obj:    newDeployment("prod", "d", 5),
		want:   nil,
	}, {
		name:   "a false condition excludes the object for every binding",
		policy: newPolicy("p", withMatchCondition("apps", onlyApps), withValidation(replicasRule)),
		bindings: bindings{
			newBinding("deny", "p", withActions(admissionregistrationv1.Deny)),
			newBinding("warn", "p", withActions(admissionregistrationv1.Warn)),
		},
		obj:  newDeployment("prod", "d", 1),
		want: nil,
	}, {
		name:   "a false condition wins over an error",
		policy: newPolicy("p", withMatchCondition("broken", "object.spec.missing == 1"), withMatchCondition("apps", onlyApps), withValidation(replicasRule)),
		obj:    newDeployment("prod", "d", 5),
		want:   nil,
	}, {
		name:   "an error under failurePolicy Fail",
		policy: newPolicy("p", withMatchCondition("broken", "object.spec.missing == 1"), withValidation(replicasRule)),
		obj:    newDeployment("prod", "d", 5),
		want: []row{{"matchConditions", audit.Error, "expression 'object.spec.missing == 1' resulted in error: no such key: missing",
			denyProps("failurePolicy", "Fail")}},
	}, {
		name: "an error under failurePolicy Ignore excludes the object, as the API server admits it silently",
		policy: newPolicy("p", withMatchCondition("broken", "object.spec.missing == 1"), withValidation(replicasRule),
			withFailurePolicy(admissionregistrationv1.Ignore)),
		obj:  newDeployment("prod", "d", 5),
		want: nil,
	}, {
		name: "a true condition and an error under failurePolicy Fail",
		policy: newPolicy("p", withMatchCondition("apps", onlyApps), withMatchCondition("broken", "object.spec.missing == 1"),
			withValidation(replicasRule)),
		obj: newDeployment("prod", "app-d", 5),
		want: []row{{"matchConditions", audit.Error, "expression 'object.spec.missing == 1' resulted in error: no such key: missing",
			denyProps("failurePolicy", "Fail")}},
	}, {
		name: "a true condition and an error under failurePolicy Ignore",
		policy: newPolicy("p", withMatchCondition("apps", onlyApps), withMatchCondition("broken", "object.spec.missing == 1"),
			withValidation(replicasRule), withFailurePolicy(admissionregistrationv1.Ignore)),
		obj:  newDeployment("prod", "app-d", 5),
		want: nil,
	}, {
		name:   "errors of several conditions are aggregated",
		policy: newPolicy("p", withMatchCondition("one", "object.spec.a == 1"), withMatchCondition("two", "object.spec.b == 1"), withValidation(replicasRule)),
		obj:    newDeployment("prod", "d", 5),
		want: []row{{"matchConditions", audit.Error,
			"[expression 'object.spec.a == 1' resulted in error: no such key: a, expression 'object.spec.b == 1' resulted in error: no such key: b]",
			denyProps("failurePolicy", "Fail")}},
	}})
}

func TestEvaluateAuditAnnotations(t *testing.T) {
	runCases(t, []evalCase{{
		name: "published values are properties of every result",
		policy: newPolicy("p", withValidation(replicasRule, message("too many")),
			withAuditAnnotation("replicas", "string(object.spec.replicas)"),
			withAuditAnnotation("absent", "null"),
			withAuditAnnotation("blank", "'  '")),
		obj: newDeployment("prod", "d", 5),
		want: []row{{"validations[0]", audit.Fail, "too many",
			denyProps("rule", replicasRule, "reason", "Invalid", "auditAnnotation.replicas", "5")}},
	}, {
		name:   "published on a pass",
		policy: newPolicy("p", withValidation(replicasRule), withAuditAnnotation("replicas", "'replicas: ' + string(object.spec.replicas)")),
		obj:    newDeployment("prod", "d", 1),
		want:   []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", denyProps("auditAnnotation.replicas", "replicas: 1")}},
	}, {
		name:   "a value expression of the wrong type does not compile",
		policy: newPolicy("p", withValidation(replicasRule), withAuditAnnotation("replicas", "object.spec.replicas")),
		obj:    newDeployment("prod", "d", 1),
		want: []row{{"auditAnnotations[0]", audit.Error, "compilation error: must evaluate to one of [string null_type] but got dyn",
			denyProps("rule", "object.spec.replicas", "failurePolicy", "Fail")}},
	}, {
		name:   "an evaluation error",
		policy: newPolicy("p", withValidation(replicasRule), withAuditAnnotation("x", "string(object.spec.missing)")),
		obj:    newDeployment("prod", "d", 1),
		want: []row{{"auditAnnotations[0]", audit.Error, "expression 'string(object.spec.missing)' resulted in error: no such key: missing",
			denyProps("rule", "string(object.spec.missing)", "failurePolicy", "Fail")}},
	}})
}
