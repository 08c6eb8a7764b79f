package vap

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
)

// What an expression computes from a Secret's data never reaches a result: messageExpressions fall back to
// the static message (or the default text) and audit annotation values are not published. Other kinds are
// unaffected.
func TestSecretDataNeverReachesResults(t *testing.T) {
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	const token = "czNjcjN0LXQwa2Vu" // base64 of the secret value
	leaky := newPolicy("p",
		withRules(rule("", "v1", "secrets", "CREATE"), rule("", "v1", "configmaps", "CREATE")),
		withValidation("!has(object.data) || !('token' in object.data)",
			message("tokens are not allowed here"),
			messageExpression("'found token ' + string(object.data.token)")),
		withValidation("object.metadata.name != 'x'", messageExpression("'leak ' + string(object.data.token)")),
		withAuditAnnotation("token", "string(object.data.token)"),
	)
	secretProps := func(kv ...string) map[string]string {
		return denyProps(append([]string{audit.PropReason, "Invalid", PropMessageExpression, secretMessageSkip}, kv...)...)
	}
	runCases(t, []evalCase{{
		name:   "secret: the static message, no annotation value",
		policy: leaky,
		gvr:    secrets,
		obj:    newObject("v1", "Secret", "prod", "x", withField(token, "data", "token")),
		want: []row{
			{"validations[0]", audit.Fail, "tokens are not allowed here", secretProps(audit.PropRule, "!has(object.data) || !('token' in object.data)")},
			{"validations[1]", audit.Fail, "failed expression: object.metadata.name != 'x'", secretProps(audit.PropRule, "object.metadata.name != 'x'")},
		},
	}, {
		name:   "config map: the messageExpression and the annotation, as the API server",
		policy: leaky,
		gvr:    configMaps,
		obj:    newObject("v1", "ConfigMap", "prod", "x", withField(token, "data", "token")),
		want: []row{
			{"validations[0]", audit.Fail, "found token " + token, denyProps(audit.PropRule, "!has(object.data) || !('token' in object.data)", audit.PropReason, "Invalid", PropAuditAnnotationPrefix+"token", token)},
			{"validations[1]", audit.Fail, "leak " + token, denyProps(audit.PropRule, "object.metadata.name != 'x'", audit.PropReason, "Invalid", PropAuditAnnotationPrefix+"token", token)},
		},
	}})
}

// The values of the Secrets below, which no result may hold in any form.
const (
	secretPassword = "S3cr3t-P4ssw0rd-1234"  // data.password, decoded
	appliedKey     = "APPLIEDKEY-0123456789" // stringData.apikey in the last-applied annotation
	lastApplied    = `{"apiVersion":"v1","kind":"Secret","metadata":{"annotations":{},"name":"s","namespace":"prod"},` +
		`"stringData":{"apikey":"` + appliedKey + `"},"type":"Opaque"}`
)

var secretPasswordBase64 = base64.StdEncoding.EncodeToString([]byte(secretPassword))

// The reproduction of the issue: validations whose evaluation errors quote the input.
const (
	passwordRegex = "!has(object.data) || !('password' in object.data) || 'x'.matches('(' + string(object.data.password))"
	appliedRegex  = "!has(object.metadata.annotations) || !('kubectl.kubernetes.io/last-applied-configuration' in object.metadata.annotations) || " +
		"'x'.matches('(' + object.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration'])"
	// nameRegex fails the same way on a field a Secret keeps nothing confidential in.
	nameRegex = "'x'.matches('(' + object.metadata.name)"
)

// withheld is the text of an error of expression whose details are withheld, written out independently.
func withheld(expression string) string {
	return "expression '" + expression + "' resulted in error: details withheld: the expression may read the data, stringData or annotations of a Secret"
}

// regexError is the API server's text for the error of expression, a regexp built from '(' + pattern.
func regexError(expression, pattern string) string {
	return "expression '" + expression + "' resulted in error: error parsing regexp: missing closing ): `(" + pattern + "`"
}

// secretShaped returns an object of kind with a password in data (base64, as a Secret stores it) and the
// annotation kubectl apply leaves on a Secret written with stringData.
func secretShaped(kind string, opts ...objectOption) *unstructured.Unstructured {
	return newObject("v1", kind, "prod", "s", append([]objectOption{
		withField(secretPasswordBase64, "data", "password"),
		withField(lastApplied, "metadata", "annotations", corev1.LastAppliedConfigAnnotation),
	}, opts...)...)
}

// assertNoSecretValue fails when a secret value appears in any text of results.
func assertNoSecretValue(t *testing.T, results []audit.Result, values ...string) {
	t.Helper()
	for _, r := range results {
		texts := map[string]string{"message": r.Message}
		for k, v := range r.Properties {
			texts["property "+k] = v
		}
		for where, text := range texts {
			for _, v := range values {
				if strings.Contains(text, v) {
					t.Errorf("result %s of %s: %s holds the secret value %q: %q", r.Rule, r.Resource.Kind, where, v, text)
				}
			}
		}
	}
}

func TestSecretEvaluationErrorsWithheld(t *testing.T) {
	secretValues := []string{secretPassword, secretPasswordBase64, appliedKey, lastApplied}
	unbound := func(kv ...string) map[string]string {
		return props(append([]string{audit.PropValidationActions, "Audit", audit.PropOperation, "CREATE", audit.PropFailurePolicy, "Fail"}, kv...)...)
	}
	issue := newPolicy("secret-regex-leak",
		withRules(rule("", "v1", "secrets"), rule("", "v1", "configmaps")),
		withFailurePolicy(admissionregistrationv1.Fail),
		withValidation(passwordRegex),
		withValidation(appliedRegex),
		withValidation(nameRegex),
	)
	variables := newPolicy("p",
		withRules(rule("", "v1", "secrets")),
		withVariable("password", "string(object.data.password)"),
		withVariable("pattern", "'(' + variables.password"),
		withValidation("'x'.matches(variables.pattern)"),
	)
	conditions := newPolicy("p",
		withRules(rule("", "v1", "secrets")),
		withMatchCondition("safe", "object.metadata.name.startsWith('s')"),
		withMatchCondition("password", "'x'.matches('(' + string(object.data.password))"),
		withMatchCondition("name", nameRegex),
		withValidation("true"),
	)
	cases := []struct {
		name   string
		policy *admissionregistrationv1.ValidatingAdmissionPolicy
		gvr    schema.GroupVersionResource
		obj    *unstructured.Unstructured
		want   []row
		// leaks lists values the results must not hold.
		leaks []string
	}{{
		name:   "the issue's policy, unbound, on a Secret: errors keep the expression, withhold the details",
		policy: issue,
		gvr:    secretsGVR,
		obj:    secretShaped("Secret"),
		want: []row{
			{"validations[0]", audit.Error, withheld(passwordRegex), unbound(audit.PropRule, passwordRegex)},
			{"validations[1]", audit.Error, withheld(appliedRegex), unbound(audit.PropRule, appliedRegex)},
			{"validations[2]", audit.Error, regexError(nameRegex, "s"), unbound(audit.PropRule, nameRegex)},
		},
		leaks: secretValues,
	}, {
		name:   "the same on a ConfigMap: the API server's exact text",
		policy: issue,
		gvr:    configMapsGVR,
		obj:    secretShaped("ConfigMap"),
		want: []row{
			{"validations[0]", audit.Error, regexError(passwordRegex, secretPasswordBase64), unbound(audit.PropRule, passwordRegex)},
			{"validations[1]", audit.Error, regexError(appliedRegex, lastApplied), unbound(audit.PropRule, appliedRegex)},
			{"validations[2]", audit.Error, regexError(nameRegex, "s"), unbound(audit.PropRule, nameRegex)},
		},
	}, {
		name:   "through variables",
		policy: variables,
		gvr:    secretsGVR,
		obj:    secretShaped("Secret"),
		want: []row{
			{"validations[0]", audit.Error, withheld("'x'.matches(variables.pattern)"), denyProps(audit.PropRule, "'x'.matches(variables.pattern)", audit.PropFailurePolicy, "Fail")},
		},
		leaks: secretValues,
	}, {
		name:   "matchConditions: the condition reading data is withheld",
		policy: conditions,
		gvr:    secretsGVR,
		obj:    secretShaped("Secret"),
		want: []row{
			// The matcher aggregates the errors of every condition; only the one reading data is withheld.
			{"matchConditions", audit.Error, "[" + withheld("'x'.matches('(' + string(object.data.password))") + ", " + regexError(nameRegex, "s") + "]",
				denyProps(audit.PropFailurePolicy, "Fail")},
		},
		leaks: secretValues,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var bs bindings
			if c.policy.Name != "secret-regex-leak" {
				bs = bindings{newBinding("b", c.policy.Name)}
			}
			got := CompilePolicy(c.policy, Options{}).Bind(bs, testDeps(t)).Evaluate(defaultTestContext, c.gvr, c.obj)
			diffRows(t, got, c.want)
			assertNoSecretValue(t, got, c.leaks...)
		})
	}
}

func TestSecretMessagesAndAnnotations(t *testing.T) {
	const (
		readsData     = "'password is ' + string(object.data.password)"
		readsApplied  = "'applied ' + object.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']"
		readsName     = "'name is ' + object.metadata.name"
		failing       = "!has(object.data)"
		failingAlways = "object.metadata.name == 'other'"
		badAnnotation = "'x'.matches('(' + object.metadata.name) ? 'y' : 'n'"
	)
	policy := newPolicy("p",
		withRules(rule("", "v1", "secrets"), rule("", "v1", "configmaps")),
		withValidation(failing, message("no data allowed"), messageExpression(readsData)),
		withValidation(failingAlways, messageExpression(readsApplied)),
		withValidation(failingAlways+" ", messageExpression(readsName)),
		withAuditAnnotation("password", "string(object.data.password)"),
		withAuditAnnotation("applied", "string(object.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration'])"),
		withAuditAnnotation("name", "string(object.metadata.name)"),
		withAuditAnnotation("bad", badAnnotation), // an error, of a harmless expression
	)
	annotationError := regexError(badAnnotation, "s")
	skipped := func(expression string, kv ...string) map[string]string {
		return denyProps(append([]string{audit.PropRule, expression, audit.PropReason, "Invalid",
			PropMessageExpression, secretMessageSkip, PropAuditAnnotationPrefix + "name", "s"}, kv...)...)
	}
	runCases(t, []evalCase{{
		name:   "secret: messageExpressions and annotations reading data or annotations are not evaluated, the others are",
		policy: policy,
		gvr:    secretsGVR,
		obj:    secretShaped("Secret"),
		want: []row{
			{"validations[0]", audit.Fail, "no data allowed", skipped(failing)},
			{"validations[1]", audit.Fail, "failed expression: " + failingAlways, skipped(failingAlways)},
			{"validations[2]", audit.Fail, "name is s", denyProps(audit.PropRule, failingAlways+" ", audit.PropReason, "Invalid", PropAuditAnnotationPrefix+"name", "s")},
			{"auditAnnotations[3]", audit.Error, annotationError, denyProps(audit.PropRule, badAnnotation, audit.PropFailurePolicy, "Fail", PropAuditAnnotationPrefix+"name", "s")},
		},
	}, {
		name:   "config map: every one, as the API server",
		policy: policy,
		gvr:    configMapsGVR,
		obj:    secretShaped("ConfigMap"),
		want: func() []row {
			annotations := []string{PropAuditAnnotationPrefix + "name", "s", PropAuditAnnotationPrefix + "password", secretPasswordBase64,
				PropAuditAnnotationPrefix + "applied", lastApplied}
			deny := func(expression string, kv ...string) map[string]string {
				return denyProps(append(append([]string{audit.PropRule, expression}, annotations...), kv...)...)
			}
			return []row{
				{"validations[0]", audit.Fail, "password is " + secretPasswordBase64, deny(failing, audit.PropReason, "Invalid")},
				{"validations[1]", audit.Fail, "applied " + lastApplied, deny(failingAlways, audit.PropReason, "Invalid")},
				{"validations[2]", audit.Fail, "name is s", deny(failingAlways+" ", audit.PropReason, "Invalid")},
				{"auditAnnotations[3]", audit.Error, annotationError, deny(badAnnotation, audit.PropFailurePolicy, "Fail")},
			}
		}(),
	}})
	got := CompilePolicy(policy, Options{}).Bind(bindings{newBinding("b", "p")}, testDeps(t)).Evaluate(defaultTestContext, secretsGVR, secretShaped("Secret"))
	if len(got) == 0 {
		t.Fatal("no results")
	}
	assertNoSecretValue(t, got, secretPassword, secretPasswordBase64, appliedKey, lastApplied)
}

// A policy whose params are Secrets withholds what it computes from them, for any audited object, and
// redacts the params' values from its results.
func TestSecretParams(t *testing.T) {
	const token = "param-token-0123456789"
	secretGVK := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	const (
		regex   = "'x'.matches('(' + string(params.data.token))"
		compare = "object.data.size == string(params.data.token)"
	)
	policy := newPolicy("p",
		withRules(rule("", "v1", "configmaps")),
		withParamKind(secretGVK),
		withValidation(regex),
		withValidation(compare, message("size must not be "+token), messageExpression("'size must be ' + string(params.data.token)")),
		withValidation("params.metadata.name == 'other'", messageExpression("'param ' + params.metadata.name")),
	)
	deps := func(d *Deps) {
		d.Params = params{secretGVK: {
			// Typed, without TypeMeta, as a client-go lister returns it.
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "token"}, Data: map[string][]byte{"token": []byte(token)}},
		}}
	}
	paramProps := func(kv ...string) map[string]string {
		return denyProps(append([]string{audit.PropParam, "prod/token"}, kv...)...)
	}
	runCases(t, []evalCase{{
		name:     "config map audited with a Secret as params",
		policy:   policy,
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("token"), paramRefNamespace("prod")))},
		deps:     deps,
		gvr:      configMapsGVR,
		obj:      newObject("v1", "ConfigMap", "prod", "c", withField("3", "data", "size")),
		want: []row{
			{"validations[0]", audit.Error, withheld(regex), paramProps(audit.PropRule, regex, audit.PropFailurePolicy, "Fail")},
			// The static message quotes the value: the param's redaction removes it.
			{"validations[1]", audit.Fail, "size must not be " + audit.RedactionMarker,
				paramProps(audit.PropRule, compare, audit.PropReason, "Invalid", PropMessageExpression, secretMessageSkip)},
			{"validations[2]", audit.Fail, "param token", paramProps(audit.PropRule, "params.metadata.name == 'other'", audit.PropReason, "Invalid")},
		},
	}})
}

// The analysis decides per input: a ConfigMap audited by a policy that never reads params keeps every text.
func TestSecretEvaluatorsShared(t *testing.T) {
	plain := CompilePolicy(newPolicy("p", withValidation("true", messageExpression("object.metadata.name"))), Options{})
	if plain.plain.validator != plain.secret.validator {
		t.Error("a policy whose messageExpressions read no Secret field compiled a second validator")
	}
	if plain.secret.withheld != readsObject || plain.plain.withheld != 0 {
		t.Errorf("withheld: plain %b, secret %b", plain.plain.withheld, plain.secret.withheld)
	}
	reading := CompilePolicy(newPolicy("p", withValidation("true", messageExpression("string(object.data.x)"))), Options{})
	if reading.plain.validator == reading.secret.validator {
		t.Error("a policy whose messageExpression reads data evaluates Secrets with it")
	}
}

func TestWithholdDetails(t *testing.T) {
	const expression = "'x'.matches('(' + string(object.data.password))"
	cases := []struct {
		name, message, expression string
		reads                     exposure
		want                      string
	}{{
		name:       "runtime error of an expression reading nothing of a Secret: exact",
		message:    regexError(nameRegex, "s"),
		expression: nameRegex,
		want:       regexError(nameRegex, "s"),
	}, {
		name:       "runtime error of an expression reading data: withheld",
		message:    regexError(expression, secretPasswordBase64),
		expression: expression,
		reads:      readsObject,
		want:       withheld(expression),
	}, {
		name:       "an error of an unknown form: withheld",
		message:    "something quoting " + secretPasswordBase64,
		expression: expression,
		reads:      readsParams,
		want:       withheld(expression),
	}, {
		name:    "a failure of the whole evaluation",
		message: "failed to prepare object variable for evaluation: " + secretPasswordBase64,
		reads:   readsObject,
		want:    "evaluation failed; details withheld: the policy may read the data, stringData or annotations of a Secret",
	}, {
		name:       "compilation errors depend on the policy alone",
		message:    "compilation error: compilation failed: ERROR: <input>:1:8: undeclared reference to 'x'",
		expression: expression,
		reads:      readsObject,
		want:       "compilation error: compilation failed: ERROR: <input>:1:8: undeclared reference to 'x'",
	}, {
		name:    "so does running out of budget",
		message: "validation failed due to running out of cost budget, no further validation rules will be run",
		reads:   readsObject,
		want:    "validation failed due to running out of cost budget, no further validation rules will be run",
	}, {
		name:       "and a messageExpression out of budget",
		message:    "failed messageExpression: validation failed due to running out of cost budget, no further validation rules will be run",
		expression: expression,
		reads:      readsObject,
		want:       "failed messageExpression: validation failed due to running out of cost budget, no further validation rules will be run",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := withholdDetails(c.message, c.expression, c.reads); got != c.want {
				t.Errorf("withholdDetails(%q)\n got %q\nwant %q", c.message, got, c.want)
			}
		})
	}
}

// withholdingParams serves params, except those of the kinds in withheld, which it never reads: reading
// one counts in reads.
type withholdingParams struct {
	params
	withheld map[schema.GroupVersionKind]error
	reads    *int
}

var _ ParamWithholder = withholdingParams{}

func (p withholdingParams) ParamsWithheld(gvk schema.GroupVersionKind) error { return p.withheld[gvk] }

func (p withholdingParams) Get(gvk schema.GroupVersionKind, namespace, name string) (runtime.Object, error) {
	if p.withheld[gvk] != nil {
		*p.reads++
	}
	return p.params.Get(gvk, namespace, name)
}

func (p withholdingParams) List(gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]runtime.Object, error) {
	if p.withheld[gvk] != nil {
		*p.reads++
	}
	return p.params.List(gvk, namespace, selector)
}

// Params of a withheld kind are never read: a binding whose paramRef would read them gets an error result
// saying why, whether the param exists or not and whatever its parameterNotFoundAction, so that a right and a
// wrong guess of a Secret's value look the same; a binding without a paramRef is evaluated as usual.
func TestWithheldParamsNeverRead(t *testing.T) {
	secretGVK := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	const guess = "params.data.token.startsWith('cGFyYW0t')" // base64 of "param-", a right guess
	policy := newPolicy("p", withRules(rule("", "v1", "configmaps")), withParamKind(secretGVK), withValidation("!has(params.data) || !("+guess+")"))
	reads := 0
	deps := func(d *Deps) {
		d.Params = withholdingParams{
			params: params{secretGVK: {
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "token"}, Data: map[string][]byte{"token": []byte("param-token")}},
			}},
			withheld: map[schema.GroupVersionKind]error{secretGVK: errors.New("ask for it")},
			reads:    &reads,
		}
	}
	notRead := func(binding string) row {
		return row{"configuration", audit.Error, "params not read: ask for it",
			props(audit.PropBinding, binding, audit.PropValidationActions, "Deny", audit.PropOperation, "CREATE", audit.PropFailurePolicy, "Fail")}
	}
	cm := newObject("v1", "ConfigMap", "prod", "c")
	allow := admissionregistrationv1.AllowAction
	runCases(t, []evalCase{{
		name:     "the param exists",
		policy:   policy,
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("token"), paramRefNamespace("prod")))},
		deps:     deps, gvr: configMapsGVR, obj: cm,
		want: []row{notRead("b")},
	}, {
		name:     "the param does not exist, parameterNotFoundAction Allow",
		policy:   policy,
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("absent"), paramRefNamespace("prod"), notFound(allow)))},
		deps:     deps, gvr: configMapsGVR, obj: cm,
		want: []row{notRead("b")},
	}, {
		name:     "by selector",
		policy:   policy,
		bindings: bindings{newBinding("b", "p", paramRef(paramRefSelector(map[string]string{"a": "b"})))},
		deps:     deps, gvr: configMapsGVR, obj: cm,
		want: []row{notRead("b")},
	}, {
		name:     "a binding without paramRef reads no params",
		policy:   policy,
		bindings: bindings{newBinding("b", "p")},
		deps:     deps, gvr: configMapsGVR, obj: cm,
		want: []row{{"validations", audit.Pass, "object satisfies the 1 validation evaluated", denyProps()}},
	}})
	if reads != 0 {
		t.Errorf("%d reads of withheld params", reads)
	}
}
