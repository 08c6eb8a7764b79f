package mutate

import (
	"context"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	k8sadmissionregistrationv1 "k8s.io/kubernetes/pkg/apis/admissionregistration/v1"
)

// Compiled is one MutatingAdmissionPolicy generation compiled as the API server compiles it. It is immutable
// and safe for concurrent use; Bind it, with the other policies, into a Set to evaluate objects.
type Compiled struct {
	policy    *admissionregistrationv1.MutatingAdmissionPolicy // defaulted copy
	evaluator mutating.PolicyEvaluator
	// paramKind is the parsed spec.paramKind; nil without one or when paramKindErr says why it does not parse.
	paramKind    *schema.GroupVersionKind
	paramKindErr error
	// problems says what does not compile, in spec order (see Problems).
	problems []string
}

// Problems returns what does not compile in the policy, in spec order ("spec.mutations[0].jsonPatch.expression:
// compilation failed: ..."): the paramKind, matchConditions and mutations. Each evaluation of such a policy
// fails with the API server's message; Problems is for telling its author where they look.
func (c *Compiled) Problems() []string { return slices.Clone(c.problems) }

// CacheKey identifies what Compile depends on: the policy's uid and generation.
func CacheKey(policy *admissionregistrationv1.MutatingAdmissionPolicy) string {
	return fmt.Sprintf("%s/%d", policy.UID, policy.Generation)
}

// Compile compiles policy, defaulted as the API server stores it, exactly as the API server's
// MutatingAdmissionPolicy plugin does (compilePolicy in k8s.io/apiserver/pkg/admission/plugin/policy/mutating,
// which is unexported: this is a copy of it). It never fails: an expression that does not compile fails each
// evaluation with the API server's message, as it fails each request in the API server.
func Compile(policy *admissionregistrationv1.MutatingAdmissionPolicy) (c *Compiled) {
	policy = policy.DeepCopy()
	k8sadmissionregistrationv1.SetObjectDefaults_MutatingAdmissionPolicy(policy)
	c = &Compiled{policy: policy}
	if pk := policy.Spec.ParamKind; pk != nil {
		gv, err := schema.ParseGroupVersion(pk.APIVersion)
		if err != nil {
			c.paramKindErr = fmt.Errorf("failed to parse paramKind APIVersion: %w", err)
			c.problems = append(c.problems, "spec.paramKind: "+c.paramKindErr.Error())
		} else {
			gvk := gv.WithKind(pk.Kind)
			c.paramKind = &gvk
		}
	}
	defer func() {
		if r := recover(); r != nil {
			c.evaluator = mutating.PolicyEvaluator{Error: fmt.Errorf("internal error compiling policy: %v", r)}
			c.problems = append(c.problems, c.evaluator.Error.Error())
		}
	}()
	var problems []string
	c.evaluator, problems = compilePolicy(policy)
	if c.evaluator.Error != nil {
		problems = append([]string{c.evaluator.Error.Error()}, problems...)
	}
	c.problems = append(c.problems, problems...)
	return c
}

// compilePolicy is the API server's compilePolicy, with each patcher wrapped so that the evaluation can tell
// which policy changed what (see recorder). It returns the compilation errors of the matchConditions and
// mutations too, as "<field>: <error>".
func compilePolicy(policy *admissionregistrationv1.MutatingAdmissionPolicy) (_ mutating.PolicyEvaluator, problems []string) {
	opts := plugincel.OptionalVariableDeclarations{HasParams: policy.Spec.ParamKind != nil, HasAuthorizer: true}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return mutating.PolicyEvaluator{Error: &apiservercel.Error{
			Type:   apiservercel.ErrorTypeInternal,
			Detail: fmt.Sprintf("failed to initialize CEL compiler: %v", err),
		}}, nil
	}

	compiler.CompileAndStoreVariables(convertV1Variables(policy.Spec.Variables), opts, environment.StoredExpressions)

	var matcher matchconditions.Matcher
	if matchConditions := policy.Spec.MatchConditions; len(matchConditions) > 0 {
		accessors := make([]plugincel.ExpressionAccessor, len(matchConditions))
		for i := range matchConditions {
			accessors[i] = (*matchconditions.MatchCondition)(&matchConditions[i])
		}
		conditions := compiler.CompileCondition(accessors, opts, environment.StoredExpressions)
		for _, err := range conditions.CompilationErrors() {
			problems = append(problems, "spec.matchConditions: "+err.Error())
		}
		matcher = matchconditions.NewMatcher(conditions, policy.Spec.FailurePolicy, "policy", "validate", policy.Name)
	}

	var patchers []patch.Patcher
	patchOptions := opts
	patchOptions.HasPatchTypes = true
	for i, m := range policy.Spec.Mutations {
		switch m.PatchType {
		case admissionregistrationv1.PatchTypeJSONPatch:
			if m.JSONPatch != nil {
				accessor := &patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}
				compiled := compiler.CompileMutatingEvaluator(accessor, patchOptions, environment.StoredExpressions)
				problems = append(problems, compileProblems(fmt.Sprintf("spec.mutations[%d].jsonPatch.expression", i), compiled)...)
				patchers = append(patchers, recordingPatcher{policy: policy.Name, inner: patch.NewJSONPatcher(compiled)})
			}
		case admissionregistrationv1.PatchTypeApplyConfiguration:
			if m.ApplyConfiguration != nil {
				accessor := &patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}
				compiled := compiler.CompileMutatingEvaluator(accessor, patchOptions, environment.StoredExpressions)
				problems = append(problems, compileProblems(fmt.Sprintf("spec.mutations[%d].applyConfiguration.expression", i), compiled)...)
				patchers = append(patchers, recordingPatcher{policy: policy.Name, inner: patch.NewApplyConfigurationPatcher(compiled)})
			}
		}
	}
	return mutating.PolicyEvaluator{Matcher: matcher, Mutators: patchers, CompositedCompiler: compiler}, problems
}

// compileProblems returns the compilation errors of the expression at field, as "<field>: <error>".
func compileProblems(field string, compiled plugincel.MutatingEvaluator) []string {
	errs := compiled.CompilationErrors()
	out := make([]string, 0, len(errs))
	for _, err := range errs {
		out = append(out, field+": "+err.Error())
	}
	return out
}

func convertV1Variables(variables []admissionregistrationv1.Variable) []plugincel.NamedExpressionAccessor {
	if variables == nil {
		return nil
	}
	res := make([]plugincel.NamedExpressionAccessor, len(variables))
	for i, v := range variables {
		res[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	return res
}

// recordingPatcher is one of the policy's patchers; it tells the recorder of the evaluation (in ctx) which
// policy is about to patch which object, so that each change is credited to the policy that made it.
type recordingPatcher struct {
	policy string
	inner  patch.Patcher
}

func (p recordingPatcher) Patch(ctx context.Context, r patch.Request, budget int64) (runtime.Object, error) {
	if rec, ok := ctx.Value(recorderKey{}).(*recorder); ok {
		rec.patching(p.policy, r.VersionedAttributes.VersionedObject.Object())
	}
	return p.inner.Patch(ctx, r, budget)
}
