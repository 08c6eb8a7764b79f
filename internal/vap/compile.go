package vap

import (
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/celaudit/celaudit/internal/audit"
)

// Compiled is the binding-independent part of a policy: its CEL, compiled once per policy generation. It is
// immutable and safe for concurrent use; Bind it to the policy's current bindings to evaluate objects.
type Compiled struct {
	policy        *admissionregistrationv1.ValidatingAdmissionPolicy // defaulted copy
	category      string
	severity      string
	failurePolicy admissionregistrationv1.FailurePolicyType

	// compileErr fails every evaluation: the policy could not be compiled at all.
	compileErr error
	validator  validating.Validator
	// secretValidator evaluates Secrets: it has no messageExpressions and no audit annotations, whose output
	// could quote secret data into a report. Nil when the policy has neither (validator is used).
	secretValidator validating.Validator
	// matcher evaluates matchConditions; nil without matchConditions.
	matcher matchconditions.Matcher
	// matchConditionsSkip says why the matchConditions cannot be judged; "" when they can.
	matchConditionsSkip string

	// validations holds, per spec.validations index, what the audit needs to know besides the validator.
	validations []validationInfo
	// judged lists the spec.validations indexes given to the validator, in the validator's order.
	judged []int
	// annotations lists the spec.auditAnnotations indexes given to the validator, in its order.
	annotations []int

	paramKind            *schema.GroupVersionKind
	paramKindErr         error
	readsNamespaceObject bool
}

type validationInfo struct {
	expression string
	// skip says why the validation cannot be judged for a stored object; "" when it can.
	skip string
	// messageSkip says why the messageExpression is not evaluated; "" when it is (or there is none).
	messageSkip string
	// hasMessageExpression says whether the validation has a messageExpression that is evaluated.
	hasMessageExpression bool
}

// CacheKey identifies what CompilePolicy depends on: the policy's uid and generation, and the annotations that
// set category and severity (annotations do not change the generation).
func CacheKey(policy *admissionregistrationv1.ValidatingAdmissionPolicy) string {
	return fmt.Sprintf("%s/%d/%q/%q", policy.UID, policy.Generation,
		policy.Annotations[AnnotationCategory], policy.Annotations[AnnotationSeverity])
}

// CompilePolicy compiles policy as the apiserver's ValidatingAdmissionPolicy plugin does (compilePolicy in
// k8s.io/apiserver/pkg/admission/plugin/policy/validating). It never fails: what does not compile is reported
// by the results of every evaluation.
func CompilePolicy(policy *admissionregistrationv1.ValidatingAdmissionPolicy, opts Options) (c *Compiled) {
	policy = defaultPolicy(policy)
	c = &Compiled{
		policy:        policy,
		category:      categoryOf(policy, opts),
		severity:      severityOf(policy, opts),
		failurePolicy: *policy.Spec.FailurePolicy,
	}
	if pk := policy.Spec.ParamKind; pk != nil {
		gv, err := schema.ParseGroupVersion(pk.APIVersion)
		if err != nil {
			c.paramKindErr = fmt.Errorf("failed to parse paramKind APIVersion: %w", err)
		} else {
			gvk := gv.WithKind(pk.Kind)
			c.paramKind = &gvk
		}
	}
	defer func() {
		if r := recover(); r != nil {
			c.compileErr = fmt.Errorf("internal error compiling policy: %v", r)
		}
	}()
	c.compile(opts)
	return c
}

func (c *Compiled) compile(opts Options) {
	spec := &c.policy.Spec
	ver := opts.CompatibilityVersion
	if ver == nil {
		ver = environment.DefaultCompatibilityVersion()
	}
	compiler, err := cel.NewCompositedCompiler(environment.MustBaseEnvSet(ver))
	if err != nil {
		c.compileErr = err
		return
	}
	hasParams := spec.ParamKind != nil
	optionalVars := cel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	messageVars := cel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: false}

	variables := make([]cel.NamedExpressionAccessor, len(spec.Variables))
	for i, v := range spec.Variables {
		variables[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(variables, optionalVars, environment.StoredExpressions)

	env, err := compiler.Env(environment.StoredExpressions)
	if err != nil {
		env = nil // without an environment nothing is inspected; compiling reports the problem
	}
	deps := newUserDependency(env, spec.Variables)

	if len(spec.MatchConditions) > 0 {
		conditions := make([]cel.ExpressionAccessor, len(spec.MatchConditions))
		for i := range spec.MatchConditions {
			conditions[i] = (*matchconditions.MatchCondition)(&spec.MatchConditions[i])
			if reason := deps.reason(spec.MatchConditions[i].Expression); reason != "" && c.matchConditionsSkip == "" {
				c.matchConditionsSkip = fmt.Sprintf(
					"cannot decide whether the policy applies to a stored object: matchConditions[%d] %q depends on the requesting user (%s)",
					i, spec.MatchConditions[i].Name, reason)
			}
		}
		// The matcher always fails on errors so that they are reported; the apiserver would drop them under
		// failurePolicy Ignore, which the failurePolicy property records.
		fail := admissionregistrationv1.Fail
		c.matcher = matchconditions.NewMatcher(
			compiler.CompileCondition(conditions, optionalVars, environment.StoredExpressions),
			&fail, "policy", "validate", c.policy.Name)
	}

	var validations, messages []cel.ExpressionAccessor
	c.validations = make([]validationInfo, len(spec.Validations))
	for i, v := range spec.Validations {
		info := validationInfo{expression: v.Expression}
		if reason := deps.reason(v.Expression); reason != "" {
			info.skip = fmt.Sprintf("cannot be judged for a stored object: the expression depends on the requesting user (%s)", reason)
			c.validations[i] = info
			continue
		}
		validations = append(validations, &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason})
		var message cel.ExpressionAccessor // nil keeps validations and messages aligned
		if v.MessageExpression != "" {
			if reason := deps.reason(v.MessageExpression); reason != "" {
				info.messageSkip = fmt.Sprintf("not evaluated: depends on the requesting user (%s)", reason)
			} else {
				message = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
				info.hasMessageExpression = true
			}
		}
		messages = append(messages, message)
		c.validations[i] = info
		c.judged = append(c.judged, i)
	}

	hasMessageExpressions := slices.ContainsFunc(messages, func(m cel.ExpressionAccessor) bool { return m != nil })

	var annotations []cel.ExpressionAccessor
	for i, a := range spec.AuditAnnotations {
		if deps.reason(a.ValueExpression) != "" {
			continue // a value computed for no user would be meaningless
		}
		annotations = append(annotations, &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression})
		c.annotations = append(c.annotations, i)
	}

	c.validator = validating.NewValidator(
		compiler.CompileCondition(validations, optionalVars, environment.StoredExpressions),
		nil, // matchConditions are evaluated by c.matcher, so that their errors are told apart
		compiler.CompileCondition(annotations, optionalVars, environment.StoredExpressions),
		compiler.CompileCondition(messages, messageVars, environment.StoredExpressions),
		&c.failurePolicy,
		nil,
	)
	if hasMessageExpressions || len(annotations) > 0 {
		c.secretValidator = validating.NewValidator(
			compiler.CompileCondition(validations, optionalVars, environment.StoredExpressions),
			nil,
			compiler.CompileCondition(nil, optionalVars, environment.StoredExpressions),
			compiler.CompileCondition(make([]cel.ExpressionAccessor, len(messages)), messageVars, environment.StoredExpressions),
			&c.failurePolicy,
			nil,
		)
	}
	c.readsNamespaceObject = deps.namespaceObject
}

// Name returns the policy's name.
func (c *Compiled) Name() string { return c.policy.Name }

// defaultPolicy returns a copy of policy with the apiserver's defaults applied (policies read from the API are
// already defaulted; others, e.g. from files, may not be, and nil selectors would match nothing).
func defaultPolicy(in *admissionregistrationv1.ValidatingAdmissionPolicy) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p := in.DeepCopy()
	if p.Spec.FailurePolicy == nil {
		fail := admissionregistrationv1.Fail
		p.Spec.FailurePolicy = &fail
	}
	defaultMatchResources(p.Spec.MatchConstraints)
	return p
}

func defaultBinding(in *admissionregistrationv1.ValidatingAdmissionPolicyBinding) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	b := in.DeepCopy()
	defaultMatchResources(b.Spec.MatchResources)
	return b
}

// defaultMatchResources applies SetDefaults_MatchResources and SetDefaults_Rule of
// k8s.io/kubernetes/pkg/apis/admissionregistration/v1.
func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		equivalent := admissionregistrationv1.Equivalent
		m.MatchPolicy = &equivalent
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				all := admissionregistrationv1.AllScopes
				rules[i].Scope = &all
			}
		}
	}
}

func categoryOf(policy *admissionregistrationv1.ValidatingAdmissionPolicy, opts Options) string {
	if c := strings.TrimSpace(policy.Annotations[AnnotationCategory]); c != "" {
		return c
	}
	if opts.Category != "" {
		return opts.Category
	}
	return DefaultCategory
}

// severityOf returns the policy's severity annotation when it is one the PolicyReport API allows.
func severityOf(policy *admissionregistrationv1.ValidatingAdmissionPolicy, opts Options) string {
	if s, ok := validSeverity(policy.Annotations[AnnotationSeverity]); ok {
		return s
	}
	if s, ok := validSeverity(opts.Severity); ok {
		return s
	}
	return audit.SeverityMedium
}

func validSeverity(s string) (string, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case audit.SeverityCritical, audit.SeverityHigh, audit.SeverityMedium, audit.SeverityLow, audit.SeverityInfo:
		return s, true
	}
	return "", false
}
