package vap

import (
	"fmt"
	"slices"

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
	policy *admissionregistrationv1.ValidatingAdmissionPolicy // defaulted copy
	// key identifies the policy's results: the policy's own, or that of the object it stands for.
	key           audit.PolicyKey
	category      string
	severity      string
	failurePolicy admissionregistrationv1.FailurePolicyType

	// compileErr fails every evaluation: the policy could not be compiled at all.
	compileErr error
	// plain evaluates objects that are not Secrets, secret evaluates Secrets (they share one evaluator unless
	// some messageExpression or audit annotation may read a Secret's sensitive fields: secret leaves those
	// out, since their output could quote them).
	plain, secret evaluator
	// matcher evaluates matchConditions; nil without matchConditions.
	matcher matchconditions.Matcher
	// matchConditionsSkip says why the matchConditions cannot be judged; "" when they can.
	matchConditionsSkip string
	// matchConditionReads holds, per spec.matchConditions index, what the condition may read of a Secret.
	matchConditionReads []exposure

	// validations holds, per spec.validations index, what the audit needs to know besides the validator.
	validations []validationInfo
	// judged lists the spec.validations indexes given to the validator, in the validator's order.
	judged []int
	// passMessage is the message of a pass, which depends only on the number of validations judged: made
	// once here rather than for each of the many passes.
	passMessage string

	paramKind    *schema.GroupVersionKind
	paramKindErr error
	// problems says what did not compile, in spec order (see Problems).
	problems []string
	// paramsAreSecrets says that the paramKind is the core v1 Secret: the params' sensitive fields are then
	// withheld like an audited Secret's, and results are redacted of each param's values.
	paramsAreSecrets     bool
	readsNamespaceObject bool
	// expandPodTemplates is the policy's annotation asking Bind to evaluate workloads' pod templates too. It
	// is part of CacheKey, as every celaudit annotation is.
	expandPodTemplates bool
}

// evaluator is a validator and what the audit needs to read its results.
type evaluator struct {
	validator validating.Validator
	// withheld are the inputs that are Secrets for this evaluator: no text computed from their sensitive
	// fields may reach a result.
	withheld exposure
	// annotations lists the spec.auditAnnotations indexes given to the validator, in its order.
	annotations []int
	// reads is what the expressions the validator evaluates may read; a failure of the whole evaluation,
	// which names no expression, is reported in full only when reads and withheld do not meet.
	reads exposure
}

type validationInfo struct {
	expression string
	// skip says why the validation cannot be judged for a stored object; "" when it can.
	skip string
	// messageSkip says why the messageExpression is not evaluated; "" when it is (or there is none).
	messageSkip string
	// hasMessageExpression says whether the validation has a messageExpression that is evaluated (for
	// inputs that are not withheld).
	hasMessageExpression bool
	// reads and messageReads are what the expression and the messageExpression may read of a Secret.
	reads, messageReads exposure
}

// CacheKey identifies what CompilePolicy depends on: the policy's uid and generation, and its celaudit
// annotations, which set category and severity, ask for a rescan or for pod templates to be evaluated
// (annotations do not change the generation).
func CacheKey(policy *admissionregistrationv1.ValidatingAdmissionPolicy) string {
	return fmt.Sprintf("%s/%d/%q", policy.UID, policy.Generation, audit.ParseAnnotations(policy.Annotations).Signature)
}

// CompilePolicy compiles policy as the apiserver's ValidatingAdmissionPolicy plugin does (compilePolicy in
// k8s.io/apiserver/pkg/admission/plugin/policy/validating). It never fails: what does not compile is reported
// by the results of every evaluation.
func CompilePolicy(policy *admissionregistrationv1.ValidatingAdmissionPolicy, opts Options) *Compiled {
	return CompilePolicyAs(audit.VAPKey(policy.Name), policy, opts)
}

// CompilePolicyAs compiles policy like CompilePolicy, for an object that stands for it: its results carry
// key (an AuditPolicy's, say) instead of the policy's own. The policy is evaluated exactly as the API server
// would evaluate it once registered.
func CompilePolicyAs(key audit.PolicyKey, policy *admissionregistrationv1.ValidatingAdmissionPolicy, opts Options) (c *Compiled) {
	policy = defaultPolicy(policy)
	c = &Compiled{
		policy:        policy,
		key:           key,
		category:      categoryOf(policy, opts),
		severity:      severityOf(policy, opts),
		failurePolicy: *policy.Spec.FailurePolicy,
		// Read before compiling, so that a policy whose CEL does not compile still expands, and reports its
		// compile error on the templates too.
		expandPodTemplates: audit.ParseAnnotations(policy.Annotations).ExpandPodTemplates,
	}
	if pk := policy.Spec.ParamKind; pk != nil {
		gv, err := schema.ParseGroupVersion(pk.APIVersion)
		if err != nil {
			c.paramKindErr = fmt.Errorf("failed to parse paramKind APIVersion: %w", err)
		} else {
			gvk := gv.WithKind(pk.Kind)
			c.paramKind = &gvk
			c.paramsAreSecrets = isSecret(gvk)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			c.compileErr = fmt.Errorf("internal error compiling policy: %v", r)
		}
		c.problems = c.listProblems(c.problems)
	}()
	c.problems = c.compile(opts)
	return c
}

// Problems lists what in the policy does not compile, in spec order, each as "<field>: <error>" with the
// error as the results show it: the policy as a whole (an internal error, a paramKind whose apiVersion does
// not parse), then each variable, matchCondition, validation, messageExpression and audit annotation that
// fails to compile or type-check. Nil when everything compiled. The API server rejects such expressions when
// a policy is written, so they come from a policy stored under other rules: another Kubernetes version, or
// a policy read from a file.
func (c *Compiled) Problems() []string { return slices.Clone(c.problems) }

// MatchConstraints returns a copy of the policy's matchConstraints, defaulted as the API server defaults them.
func (c *Compiled) MatchConstraints() *admissionregistrationv1.MatchResources {
	return c.policy.Spec.MatchConstraints.DeepCopy()
}

// WithMatchConstraints returns the policy as it would be with matchConstraints m (defaulted as the API server
// defaults them): the same compiled expressions, matching other requests. It compiles nothing: what-if judges
// the next UPDATE of an object with the policy narrowed to UPDATE requests, without compiling it again.
func (c *Compiled) WithMatchConstraints(m *admissionregistrationv1.MatchResources) *Compiled {
	out := *c
	out.policy = c.policy.DeepCopy()
	out.policy.Spec.MatchConstraints = m.DeepCopy()
	defaultMatchResources(out.policy.Spec.MatchConstraints)
	return &out
}

// listProblems returns the problems of the policy as a whole followed by exprs, the problems of its
// expressions.
func (c *Compiled) listProblems(exprs []string) []string {
	var out []string
	if c.compileErr != nil {
		out = append(out, c.compileErr.Error())
	}
	if c.paramKindErr != nil {
		out = append(out, "spec.paramKind.apiVersion: "+c.paramKindErr.Error())
	}
	return append(out, exprs...)
}

// compileRecorder compiles as the apiserver's compiler does and records each expression that fails. It
// stands for both the Compiler and the ConditionCompiler of a cel.CompositedCompiler, so that variables and
// conditions are compiled through it; the ConditionEvaluators it returns are the apiserver's, built from the
// same compilation results.
type compileRecorder struct {
	cel.Compiler
	failed map[cel.ExpressionAccessor]error
}

var _ cel.ConditionCompiler = &compileRecorder{}

func (r *compileRecorder) CompileCELExpression(e cel.ExpressionAccessor, opts cel.OptionalVariableDeclarations, mode environment.Type) cel.CompilationResult {
	res := r.Compiler.CompileCELExpression(e, opts, mode)
	if res.Error != nil {
		r.failed[e] = res.Error
	}
	return res
}

// CompileCondition is the apiserver's conditionCompiler.CompileCondition (k8s.io/apiserver
// pkg/admission/plugin/cel/condition.go), compiling through r.
func (r *compileRecorder) CompileCondition(exprs []cel.ExpressionAccessor, opts cel.OptionalVariableDeclarations, mode environment.Type) cel.ConditionEvaluator {
	results := make([]cel.CompilationResult, len(exprs))
	for i, e := range exprs {
		if e == nil {
			continue
		}
		results[i] = r.CompileCELExpression(e, opts, mode)
	}
	return cel.NewCondition(results)
}

// problem returns "<field>: <message>" for an accessor that failed to compile, with the message its results
// show: the evaluation of an expression that did not compile fails with "compilation error: <error>"
// (cel.evaluationActivation.Evaluate), and an expression reading a variable that did not compile with
// "composited variable <name> fails to compile: <error>".
func (r *compileRecorder) problem(field string, e cel.ExpressionAccessor) (string, bool) {
	err, failed := r.failed[e]
	if !failed {
		return "", false
	}
	if v, ok := e.(*validating.Variable); ok {
		return fmt.Sprintf("%s: composited variable %q fails to compile: %v", field, v.Name, err), true
	}
	return fmt.Sprintf("%s: compilation error: %v", field, err), true
}

// compile compiles the policy's expressions and returns the problems of those that failed, in spec order.
func (c *Compiled) compile(opts Options) (problems []string) {
	cc, err := newCompilation(&c.policy.Spec, opts, c.paramsAreSecrets)
	if err != nil {
		c.compileErr = err
		return nil
	}
	c.compileMatchConditions(cc)
	c.compileValidations(cc)
	cc.prepareAuditAnnotations(&c.policy.Spec)
	c.buildEvaluators(cc)
	c.readsNamespaceObject = cc.deps.namespaceObject
	return cc.problems(&c.policy.Spec)
}

// compilation is one policy's compilation under way: the apiserver's compiler, recording what fails, what
// the expressions may read, and the accessors compiled for each field, from which the evaluators are built
// and the problems listed.
type compilation struct {
	compiler *cel.CompositedCompiler
	recorder *compileRecorder
	// optionalVars declare what every expression may read; messageVars, what a messageExpression may.
	optionalVars, messageVars cel.OptionalVariableDeclarations
	deps                      *userDependency
	secrets                   *secretReads

	variables  []cel.NamedExpressionAccessor
	conditions []cel.ExpressionAccessor // spec.matchConditions; nil without them
	// validations are the validations judged, in the validator's order, and messages their
	// messageExpressions (nil for none), aligned with them.
	validations []cel.ExpressionAccessor
	messages    []*validating.MessageExpressionCondition
	// validationAccessors and messageAccessors hold the accessors compiled for each spec.validations index,
	// nil for those not compiled.
	validationAccessors, messageAccessors []cel.ExpressionAccessor
	// annotations are the spec.auditAnnotations indexes that can be evaluated; annotationReads and
	// annotationAccessors hold, per index, what each may read and its accessor.
	annotations         []int
	annotationReads     []exposure
	annotationAccessors []cel.ExpressionAccessor
}

// newCompilation starts compiling spec: it builds the apiserver's compiler for the environment opts ask for,
// compiles the variables (every other expression may read them) and inspects what they read.
func newCompilation(spec *admissionregistrationv1.ValidatingAdmissionPolicySpec, opts Options, paramsAreSecrets bool) (*compilation, error) {
	ver := opts.CompatibilityVersion
	if ver == nil {
		ver = environment.DefaultCompatibilityVersion()
	}
	compiler, err := cel.NewCompositedCompiler(environment.MustBaseEnvSet(ver))
	if err != nil {
		return nil, err
	}
	recorder := &compileRecorder{Compiler: compiler.Compiler, failed: map[cel.ExpressionAccessor]error{}}
	compiler.Compiler, compiler.ConditionCompiler = recorder, recorder
	hasParams := spec.ParamKind != nil
	cc := &compilation{
		compiler:     compiler,
		recorder:     recorder,
		optionalVars: cel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true},
		messageVars:  cel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: false},
		variables:    make([]cel.NamedExpressionAccessor, len(spec.Variables)),
	}
	for i, v := range spec.Variables {
		cc.variables[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(cc.variables, cc.optionalVars, environment.StoredExpressions)
	env, err := compiler.Env(environment.StoredExpressions)
	if err != nil {
		env = nil // without an environment nothing is inspected; compiling reports the problem
	}
	cc.deps = newUserDependency(env, spec.Variables)
	cc.secrets = newSecretReads(env, spec.Variables, paramsAreSecrets)
	return cc, nil
}

// compileCondition compiles exprs as the apiserver compiles a policy's conditions.
func (cc *compilation) compileCondition(exprs []cel.ExpressionAccessor, vars cel.OptionalVariableDeclarations) cel.ConditionEvaluator {
	return cc.compiler.CompileCondition(exprs, vars, environment.StoredExpressions)
}

// compileMatchConditions compiles the matchConditions into c.matcher, and records what each may read and
// whether they can be judged for a stored object at all.
func (c *Compiled) compileMatchConditions(cc *compilation) {
	spec := &c.policy.Spec
	if len(spec.MatchConditions) == 0 {
		return
	}
	cc.conditions = make([]cel.ExpressionAccessor, len(spec.MatchConditions))
	c.matchConditionReads = make([]exposure, len(spec.MatchConditions))
	for i := range spec.MatchConditions {
		cc.conditions[i] = (*matchconditions.MatchCondition)(&spec.MatchConditions[i])
		c.matchConditionReads[i] = cc.secrets.of(spec.MatchConditions[i].Expression)
		if reason := cc.deps.reason(spec.MatchConditions[i].Expression); reason != "" && c.matchConditionsSkip == "" {
			c.matchConditionsSkip = fmt.Sprintf(
				"cannot decide whether the policy applies to a stored object: matchConditions[%d] %q depends on the requesting user (%s)",
				i, spec.MatchConditions[i].Name, reason)
		}
	}
	// The matcher applies the policy's failurePolicy, as the apiserver's does: a condition that errors is an
	// error under Fail and excludes the object under Ignore, where the apiserver admits it silently.
	c.matcher = matchconditions.NewMatcher(cc.compileCondition(cc.conditions, cc.optionalVars),
		&c.failurePolicy, "policy", "validate", c.policy.Name)
}

// compileValidations decides, for each validation, whether it can be judged for a stored object and whether
// its messageExpression is evaluated, records what they read, and collects the accessors to compile.
func (c *Compiled) compileValidations(cc *compilation) {
	spec := &c.policy.Spec
	c.validations = make([]validationInfo, len(spec.Validations))
	cc.validationAccessors = make([]cel.ExpressionAccessor, len(spec.Validations))
	cc.messageAccessors = make([]cel.ExpressionAccessor, len(spec.Validations))
	for i, v := range spec.Validations {
		info := validationInfo{expression: v.Expression}
		if reason := cc.deps.reason(v.Expression); reason != "" {
			info.skip = fmt.Sprintf("cannot be judged for a stored object: the expression depends on the requesting user (%s)", reason)
			c.validations[i] = info
			continue
		}
		info.reads = cc.secrets.of(v.Expression)
		cc.validationAccessors[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		cc.validations = append(cc.validations, cc.validationAccessors[i])
		var message *validating.MessageExpressionCondition
		if v.MessageExpression != "" {
			if reason := cc.deps.reason(v.MessageExpression); reason != "" {
				info.messageSkip = fmt.Sprintf("not evaluated: depends on the requesting user (%s)", reason)
			} else {
				message = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
				cc.messageAccessors[i] = message
				info.hasMessageExpression = true
				info.messageReads = cc.secrets.of(v.MessageExpression)
			}
		}
		cc.messages = append(cc.messages, message)
		c.validations[i] = info
		c.judged = append(c.judged, i)
	}
	c.passMessage = passMessage(len(c.judged))
}

// prepareAuditAnnotations collects the audit annotations that can be evaluated and what each may read.
func (cc *compilation) prepareAuditAnnotations(spec *admissionregistrationv1.ValidatingAdmissionPolicySpec) {
	cc.annotationReads = make([]exposure, len(spec.AuditAnnotations))
	cc.annotationAccessors = make([]cel.ExpressionAccessor, len(spec.AuditAnnotations))
	for i, a := range spec.AuditAnnotations {
		if cc.deps.reason(a.ValueExpression) != "" {
			continue // a value computed for no user would be meaningless
		}
		cc.annotations = append(cc.annotations, i)
		cc.annotationReads[i] = cc.secrets.of(a.ValueExpression)
		cc.annotationAccessors[i] = &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
}

// buildEvaluators builds c.plain, which evaluates objects that are not Secrets, and c.secret, which
// evaluates Secrets: the same evaluator unless some messageExpression or audit annotation may read an
// object's sensitive fields, which the Secrets' evaluator then leaves out, since their output could quote
// them. The validations are evaluated, whatever they read, for every object: a verdict is a boolean and
// discloses nothing. One compiled copy of them serves both evaluators: an evaluator keeps no state between
// calls.
func (c *Compiled) buildEvaluators(cc *compilation) {
	judged := cc.compileCondition(cc.validations, cc.optionalVars)
	var withheld exposure
	if c.paramsAreSecrets {
		withheld = readsParams
	}
	c.plain = c.evaluator(cc, judged, withheld)
	var quoted exposure // what the output of messageExpressions and audit annotations may quote
	for position, m := range cc.messages {
		if m != nil {
			quoted |= c.validations[c.judged[position]].messageReads
		}
	}
	for _, i := range cc.annotations {
		quoted |= cc.annotationReads[i]
	}
	if quoted&readsObject != 0 {
		c.secret = c.evaluator(cc, judged, withheld|readsObject)
	} else {
		c.secret = c.plain
		c.secret.withheld |= readsObject
	}
}

// evaluator builds the evaluator of the inputs withheld stands for: the judged validations, and the
// messageExpressions and audit annotations that read none of those inputs' sensitive fields.
func (c *Compiled) evaluator(cc *compilation, judged cel.ConditionEvaluator, withheld exposure) evaluator {
	ev := evaluator{withheld: withheld}
	var messageConditions, annotationConditions []cel.ExpressionAccessor
	for position, m := range cc.messages {
		info := c.validations[c.judged[position]]
		ev.reads |= info.reads
		if m == nil || info.messageReads&withheld != 0 {
			messageConditions = append(messageConditions, nil) // nil keeps validations and messages aligned
			continue
		}
		messageConditions = append(messageConditions, m)
		ev.reads |= info.messageReads
	}
	for _, i := range cc.annotations {
		if cc.annotationReads[i]&withheld != 0 {
			continue
		}
		annotationConditions = append(annotationConditions, cc.annotationAccessors[i])
		ev.annotations = append(ev.annotations, i)
		ev.reads |= cc.annotationReads[i]
	}
	ev.validator = validating.NewValidator(
		judged,
		nil, // matchConditions are evaluated by c.matcher, so that their errors are told apart
		cc.compileCondition(annotationConditions, cc.optionalVars),
		cc.compileCondition(messageConditions, cc.messageVars),
		&c.failurePolicy,
		nil,
	)
	return ev
}

// problems lists the expressions of spec that failed to compile, in spec order, as "<field>: <error>".
func (cc *compilation) problems(spec *admissionregistrationv1.ValidatingAdmissionPolicySpec) []string {
	var problems []string
	add := func(field string, e cel.ExpressionAccessor) {
		if p, failed := cc.recorder.problem(field, e); failed {
			problems = append(problems, p)
		}
	}
	for i, v := range cc.variables {
		add(fmt.Sprintf("spec.variables[%d].expression", i), v)
	}
	for i, e := range cc.conditions {
		add(fmt.Sprintf("spec.matchConditions[%d].expression", i), e)
	}
	for i := range spec.Validations {
		add(fmt.Sprintf("spec.validations[%d].expression", i), cc.validationAccessors[i])
		add(fmt.Sprintf("spec.validations[%d].messageExpression", i), cc.messageAccessors[i])
	}
	for i, e := range cc.annotationAccessors {
		add(fmt.Sprintf("spec.auditAnnotations[%d].valueExpression", i), e)
	}
	return problems
}

// isSecret reports whether gvk is the core v1 Secret.
func isSecret(gvk schema.GroupVersionKind) bool {
	return gvk.Group == "" && gvk.Version == "v1" && gvk.Kind == "Secret"
}

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
	if opts.Category != "" {
		return audit.ParseAnnotations(policy.Annotations).CategoryOr(opts.Category)
	}
	return audit.ParseAnnotations(policy.Annotations).CategoryOr(DefaultCategory)
}

// severityOf returns the policy's severity annotation when it is one the PolicyReport API allows.
func severityOf(policy *admissionregistrationv1.ValidatingAdmissionPolicy, opts Options) string {
	def, ok := audit.ParseSeverity(opts.Severity)
	if !ok {
		def = audit.SeverityMedium
	}
	return audit.ParseAnnotations(policy.Annotations).SeverityOr(def)
}

// Defaulted returns a copy of policy with the defaults the API server applies when it stores one, so that a
// policy written by celaudit can be compared with the stored one.
func Defaulted(policy *admissionregistrationv1.ValidatingAdmissionPolicy) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return defaultPolicy(policy)
}

// DefaultedBinding returns a copy of binding with the defaults the API server applies when it stores one.
func DefaultedBinding(binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return defaultBinding(binding)
}
