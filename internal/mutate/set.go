package mutate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	k8sadmissionregistrationv1 "k8s.io/kubernetes/pkg/apis/admissionregistration/v1"

	"github.com/celaudit/celaudit/internal/vap"
)

// Set is the MutatingAdmissionPolicies of a cluster bound to their bindings: what the API server's
// MutatingAdmissionPolicy plugin holds, evaluated per object by Evaluate. It is immutable and safe for
// concurrent use; build it again when a policy, a binding, discovery or the CRDs change. Namespaces and params
// are read at evaluation time.
type Set struct {
	types *Types
	deps  vap.Deps
	// hooks are the bound policies in evaluation order, each with a copy of its policy whose failurePolicy is
	// Fail, so that the dispatcher reports every error (see failurePolicy).
	hooks []mutating.PolicyHook
	// failurePolicy is each policy's own failurePolicy, by name.
	failurePolicy map[string]admissionregistrationv1.FailurePolicyType
	matcher       generic.PolicyMatcher
	dispatcher    generic.Dispatcher[mutating.PolicyHook]
}

// NewSet binds policies to bindings (a binding applies to the policy its spec.policyName names) as the API
// server's policy source does: a policy without bindings is not applied, nor is a binding whose policy is
// missing. Bindings are defaulted as the API server stores them.
//
// The API server applies policies in the order it happens to hold them (Go map order, which varies from
// one API server to the next); the Set applies them in order of name, and bindings of one policy in order of
// name. Reinvocation (reinvocationPolicy: IfNeeded) makes the outcome independent of the order for policies
// that ask for it and whose changes converge; for others it is not, on the API server either.
func NewSet(policies []*Compiled, bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding, types *Types, deps vap.Deps) *Set {
	s := &Set{
		types:         types,
		deps:          deps,
		failurePolicy: map[string]admissionregistrationv1.FailurePolicyType{},
	}
	matcher := vap.NewMatcher(deps.Namespaces)
	s.matcher = generic.NewPolicyMatcher(matcher)
	s.dispatcher = mutating.NewDispatcher(noUserAuthorizer{}, matcher, typeConverters{types})

	byPolicy := map[string][]*admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	for _, b := range bindings {
		if b == nil {
			continue
		}
		b = b.DeepCopy()
		k8sadmissionregistrationv1.SetObjectDefaults_MutatingAdmissionPolicyBinding(b)
		byPolicy[b.Spec.PolicyName] = append(byPolicy[b.Spec.PolicyName], b)
	}
	sorted := slices.Clone(policies)
	slices.SortFunc(sorted, func(a, b *Compiled) int { return strings.Compare(a.policy.Name, b.policy.Name) })
	for _, c := range sorted {
		bs := byPolicy[c.policy.Name]
		if len(bs) == 0 || c.paramKindErr != nil {
			// The API server skips a policy whose paramKind does not parse (its validation refuses one).
			continue
		}
		slices.SortFunc(bs, func(a, b *admissionregistrationv1.MutatingAdmissionPolicyBinding) int {
			return strings.Compare(a.Name, b.Name)
		})
		s.failurePolicy[c.policy.Name] = *c.policy.Spec.FailurePolicy
		policy := c.policy.DeepCopy()
		fail := admissionregistrationv1.Fail
		policy.Spec.FailurePolicy = &fail
		hook := mutating.PolicyHook{Policy: policy, Bindings: bs, Evaluator: c.evaluator}
		if c.evaluator.Error != nil {
			hook.ConfigurationError = c.evaluator.Error
		}
		if c.paramKind != nil {
			hook.ParamInformer, hook.ParamScope, hook.ConfigurationError = s.params(*c.paramKind)
		}
		s.hooks = append(s.hooks, hook)
	}
	return s
}

// params returns the informer and scope of the params of kind gvk, or the API server's configuration error
// when the kind is not served (policy_source.go, ensureParamsForPolicyLocked).
func (s *Set) params(gvk schema.GroupVersionKind) (inf informers.GenericInformer, scope meta.RESTScope, err error) {
	notFound := fmt.Errorf("failed to find resource referenced by paramKind: '%v'", gvk)
	if s.deps.Resolver == nil {
		return nil, nil, notFound
	}
	res, rerr := s.deps.Resolver.ResourceForKind(gvk)
	if rerr != nil {
		return nil, nil, notFound
	}
	scope = meta.RESTScopeRoot
	if res.Namespaced {
		scope = meta.RESTScopeNamespace
	}
	return vap.NewParamInformer(s.deps.Params, gvk), scope, nil
}

// typeConverters gives the dispatcher the type converters of Types; the API server's manager reads them from
// its own OpenAPI instead.
type typeConverters struct{ types *Types }

func (t typeConverters) GetTypeConverter(gvk schema.GroupVersionKind) managedfields.TypeConverter {
	return t.types.typeConverter(gvk)
}

func (typeConverters) Run(context.Context) {}

// noUserAuthorizer answers the authorizer variable of expressions. A stored object has no requesting user,
// so every check has no opinion (the caller is denied), with a reason that says so.
type noUserAuthorizer struct{}

func (noUserAuthorizer) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionNoOpinion, "celaudit judges stored objects without a requesting user", nil
}
