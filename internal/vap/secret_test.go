package vap

import (
	"strings"
	"testing"

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

	p := Compile(leaky, nil, testDeps(t), Options{})
	for _, r := range p.Evaluate(t.Context(), secrets, newObject("v1", "Secret", "prod", "x", withField(token, "data", "token"))) {
		if strings.Contains(r.Message, token) {
			t.Errorf("secret data in message %q", r.Message)
		}
		for k, v := range r.Properties {
			if strings.Contains(v, token) {
				t.Errorf("secret data in property %s=%q", k, v)
			}
		}
	}
}
