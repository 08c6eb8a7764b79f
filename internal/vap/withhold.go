package vap

import (
	"errors"
	"fmt"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// Texts that replace the details of an evaluation error that could quote a Secret. Evaluation errors quote
// their input: Go's regexp errors repeat the whole pattern, conversions repeat the string they failed on.
const (
	withheldExpressionDetails = "details withheld: the expression may read the data, stringData or annotations of a Secret"
	withheldEvaluationDetails = "evaluation failed; details withheld: the policy may read the data, stringData or annotations of a Secret"
)

// runtimeErrorPrefix is how the apiserver begins the error of an expression that failed at run time
// (k8s.io/apiserver/pkg/admission/plugin/cel/activation.go).
func runtimeErrorPrefix(expression string) string {
	return fmt.Sprintf("expression '%v' resulted in error: ", expression)
}

// policyOnlyErrors begin the evaluation errors whose text depends on the policy alone, never on the evaluated
// object (k8s.io/apiserver/pkg/admission/plugin/cel/activation.go and policy/validating/validator.go): they
// are reported whole for Secrets too.
var policyOnlyErrors = []string{
	"compilation error: ",
	"unexpected internal error compiling expression",
	"validation failed due to running out of cost budget",
	"runtime cost could not be calculated for expression: ",
	"failed messageExpression: validation failed due to running out of cost budget",
	"failed messageExpression: runtime cost could not be calculated for expression: ",
}

// withholdDetails returns message, an evaluation error of expression ("" for a failure of the whole
// evaluation), with its details withheld when reads is not empty, i.e. when what failed may have read the
// sensitive fields of a Secret. The upstream structure is kept: "expression '<expression>' resulted in
// error: " followed by a statement that the details are withheld. Errors that depend on the policy alone
// are kept whole.
func withholdDetails(message, expression string, reads exposure) string {
	if reads == 0 {
		return message
	}
	for _, prefix := range policyOnlyErrors {
		if strings.HasPrefix(message, prefix) {
			return message
		}
	}
	if expression == "" {
		return withheldEvaluationDetails
	}
	return runtimeErrorPrefix(expression) + withheldExpressionDetails
}

// matchError returns the text of err, the error of the matchConditions, with the details of each condition's
// error withheld when the condition may read an input in withheld. The matcher aggregates the errors of every
// condition that failed; each is told by its expression.
func (c *Compiled) matchError(err error, withheld exposure) string {
	var reads exposure
	for _, r := range c.matchConditionReads {
		reads |= r
	}
	if reads&withheld == 0 {
		return err.Error()
	}
	var agg utilerrors.Aggregate
	if !errors.As(err, &agg) {
		return withholdDetails(err.Error(), "", reads&withheld)
	}
	members := agg.Errors()
	out := make([]error, len(members))
	for i, member := range members {
		out[i] = errors.New(c.matchConditionError(member.Error(), withheld, reads))
	}
	return utilerrors.NewAggregate(out).Error()
}

// matchConditionError withholds the details of message, the error of one matchCondition. An error that names
// no condition is judged as one of any of them (reads).
func (c *Compiled) matchConditionError(message string, withheld, reads exposure) string {
	for i, condition := range c.policy.Spec.MatchConditions {
		if strings.HasPrefix(message, runtimeErrorPrefix(condition.Expression)) {
			return withholdDetails(message, condition.Expression, c.matchConditionReads[i]&withheld)
		}
	}
	return withholdDetails(message, "", reads&withheld)
}
