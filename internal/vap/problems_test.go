package vap

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

// syntaxError is what the CEL parser says of an expression cut short after "object.spec.replicas" and a
// binary operator, at column 23.
const syntaxError = "compilation failed: ERROR: <input>:1:23: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | "

func TestProblems(t *testing.T) {
	cases := []struct {
		name   string
		policy *admissionregistrationv1.ValidatingAdmissionPolicy
		opts   Options
		want   []string
	}{{
		name:   "a policy that compiles",
		policy: newPolicy("p", withVariable("r", "object.spec.replicas"), withValidation("variables.r < 3", messageExpression("'too many'"))),
		want:   nil,
	}, {
		name:   "a validation that does not parse, another that does not type-check",
		policy: newPolicy("p", withValidation(replicasRule), withValidation("object.spec.replicas <"), withValidation("'a' + 1")),
		want: []string{
			"spec.validations[1].expression: compilation error: " + syntaxError + "object.spec.replicas <\n | ......................^",
			"spec.validations[2].expression: compilation error: compilation failed: ERROR: <input>:1:5: found no matching overload for '_+_' applied to '(string, int)'\n | 'a' + 1\n | ....^",
		},
	}, {
		name:   "a variable, as the validations that read it report it",
		policy: newPolicy("p", withVariable("bad", "object.spec.replicas +"), withValidation("variables.bad > 1")),
		want: []string{
			`spec.variables[0].expression: composited variable "bad" fails to compile: ` + syntaxError + "object.spec.replicas +\n | ......................^",
		},
	}, {
		name: "matchConditions, messageExpressions and audit annotations, in spec order",
		policy: newPolicy("p",
			withAuditAnnotation("replicas", "object.spec.replicas"),
			withValidation(replicasRule, messageExpression("1")),
			withMatchCondition("m", "object.spec.replicas"),
		),
		want: []string{
			"spec.matchConditions[0].expression: compilation error: must evaluate to bool but got dyn",
			"spec.validations[0].messageExpression: compilation error: must evaluate to string but got int",
			"spec.auditAnnotations[0].valueExpression: compilation error: must evaluate to one of [string null_type] but got dyn",
		},
	}, {
		name: "an expression that depends on the requesting user is not compiled",
		policy: newPolicy("p", withValidation("request.userInfo.username + 1 == 'admin'"),
			withValidation(replicasRule)),
		want: nil,
	}, {
		name:   "a paramKind whose apiVersion does not parse",
		policy: newPolicy("p", withValidation(replicasRule), withParamKindAPIVersion("a/b/c", "Limits")),
		want:   []string{"spec.paramKind.apiVersion: failed to parse paramKind APIVersion: unexpected GroupVersion string: a/b/c"},
	}, {
		name:   "the policy as a whole",
		policy: newPolicy("p", withValidation(replicasRule)),
		opts:   Options{CompatibilityVersion: &version.Version{}},
		want:   []string{"internal error compiling policy: version must contain an major and minor component, but got: "},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := CompilePolicy(tc.policy, tc.opts).Problems()
			if !slices.Equal(got, tc.want) {
				t.Errorf("Problems() =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func withParamKindAPIVersion(apiVersion, kind string) policyOption {
	return func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: apiVersion, Kind: kind}
	}
}
