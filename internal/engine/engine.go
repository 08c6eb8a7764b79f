package engine

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/auditpolicy"
	"github.com/celaudit/celaudit/internal/crdrules"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/vap"
)

// Views are what policies read besides the object they judge. Resources is required to bind a
// ValidatingAdmissionPolicy or a MutatingAdmissionPolicy; Namespaces serves namespaceSelectors and the
// namespaceObject variable; Params serves param objects; CRDs are the cluster's CustomResourceDefinitions,
// whose schemas a MutatingAdmissionPolicy's changes to custom resources are defaulted and merged with. A
// missing view turns the evaluations that need it into error results.
type Views struct {
	Resources  vap.ResourceResolver
	Namespaces vap.NamespaceGetter
	Params     vap.ParamSource
	CRDs       []*apiextensionsv1.CustomResourceDefinition
}

// Compiler compiles policy objects into audit policies. Its zero value compiles as the kube-apiserver
// linked into celaudit does, and AuditPolicies with the built-in exemptions.
type Compiler struct {
	CRDOptions crdrules.Options
	VAPOptions vap.Options
	// Exemptions are left out of every AuditPolicy, as of the pair celaudit registers for it.
	Exemptions auditpolicy.Exemptions
	// MAPDefaults are the category and severity of MutatingAdmissionPolicies without the annotations.
	MAPDefaults mutate.Defaults
}

// CRD compiles the validation of a CustomResourceDefinition: every served version's schema and rules.
func (c Compiler) CRD(crd *apiextensionsv1.CustomResourceDefinition) audit.Policy {
	return crdrules.Compile(crd, c.CRDOptions)
}

// VAP compiles a ValidatingAdmissionPolicy once; Bind binds it (again whenever bindings or the served
// resources change) without compiling again.
func (c Compiler) VAP(policy *admissionregistrationv1.ValidatingAdmissionPolicy) *vap.Compiled {
	return vap.CompilePolicy(policy, c.VAPOptions)
}

// VAPAs compiles a ValidatingAdmissionPolicy for an object that stands for it: its results carry key.
func (c Compiler) VAPAs(key audit.PolicyKey, policy *admissionregistrationv1.ValidatingAdmissionPolicy) *vap.Compiled {
	return vap.CompilePolicyAs(key, policy, c.VAPOptions)
}

// AuditPolicy compiles an AuditPolicy as the ValidatingAdmissionPolicy it stands for, whose results carry the
// AuditPolicy's key and name, and returns it with the binding to Bind it to. In Audit its binding's
// validationActions are [Audit] (violations are warn results), in Warn [Warn] and in Deny [Deny] (fail). The
// binding leaves out c.Exemptions' namespaces and resources.
func (c Compiler) AuditPolicy(ap *v1alpha1.AuditPolicy) (*vap.Compiled, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	a := auditpolicy.ToAdmission(ap, c.Exemptions)
	return c.VAPAs(audit.AuditPolicyKey(ap.Name), a.Policy), a.Binding
}

// Bind binds a compiled ValidatingAdmissionPolicy to its bindings (others are ignored) and to views.
func Bind(compiled *vap.Compiled, bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding, views Views) *vap.Policy {
	return compiled.Bind(bindings, vap.Deps{Resolver: views.Resources, Namespaces: views.Namespaces, Params: views.Params})
}

// MAP compiles a MutatingAdmissionPolicy once (cache it under mutate.CacheKey); BindMAPs binds the compiled
// policies together.
func (c Compiler) MAP(policy *admissionregistrationv1.MutatingAdmissionPolicy) *mutate.Compiled {
	return mutate.Compile(policy)
}

// BindMAPs binds the compiled MutatingAdmissionPolicies to their bindings and to views (the CRDs' schemas
// among them), as the chain the API server runs on every write, and returns one audit policy per policy it
// applies (see mutate.Policy). Each one's results depend on the others: bind them all again when any policy,
// binding, CRD or the served resources change.
func (c Compiler) BindMAPs(compiled []*mutate.Compiled, bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding,
	views Views) []audit.Policy {
	set := mutate.NewSet(compiled, bindings, mutate.NewTypes(views.CRDs),
		vap.Deps{Resolver: views.Resources, Namespaces: views.Namespaces, Params: views.Params})
	policies := set.Policies(c.MAPDefaults)
	out := make([]audit.Policy, len(policies))
	for i, p := range policies {
		out[i] = p
	}
	return out
}

// Object is one object to evaluate with several policies: what evaluating a Secret needs is prepared once.
type Object struct {
	gvr      schema.GroupVersionResource
	obj      *unstructured.Unstructured
	redactor *audit.Redactor // nil redacts nothing
	// cache holds what the policies evaluated on this object share (see audit.ObjectCache).
	cache *audit.ObjectCache
}

// NewObject prepares obj, read at gvr, for evaluation.
func NewObject(gvr schema.GroupVersionResource, obj *unstructured.Unstructured) Object {
	o := Object{gvr: gvr, obj: obj, cache: &audit.ObjectCache{}}
	if gvr.Group == "" && gvr.Resource == "secrets" {
		o.redactor = audit.NewSecretRedactor(obj.Object)
	}
	return o
}

// Evaluate returns the results of policy p on the object. It never panics: a panic in a policy becomes an
// error result of that policy, so one bad rule never stops an audit.
//
// Each result carries the source of p's key, so that what it came from is never guessed back from its
// name or properties (see audit.PropPolicyKind).
//
// The results on a Secret are redacted of its values, whatever policy produced them: policies withhold
// what they compute from a Secret's data, and this is the last guard should one fail to. Only Secrets pay
// for it.
func (o Object) Evaluate(ctx context.Context, p audit.Policy) []audit.Result {
	res := safeEvaluate(audit.WithObjectCache(ctx, o.cache), p, o.gvr, o.obj)
	o.redactor.Redact(res)
	source := p.Key().Source
	for i := range res {
		res[i].PolicySource = source
	}
	return res
}

// Mutation returns the evaluation of the whole chain of MutatingAdmissionPolicies that p belongs to on the
// object, shared with the results of the chain's policies on it (see mutate.Policy.Outcome); false when p is
// not a MutatingAdmissionPolicy. Front ends show with it the object as the chain leaves it.
func (o Object) Mutation(ctx context.Context, p audit.Policy) (mutate.Outcome, bool) {
	mp, ok := p.(*mutate.Policy)
	if !ok {
		return mutate.Outcome{}, false
	}
	return mp.Outcome(audit.WithObjectCache(ctx, o.cache), o.gvr, o.obj), true
}

func safeEvaluate(ctx context.Context, p audit.Policy, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) (res []audit.Result) {
	defer func() {
		if r := recover(); r != nil {
			audit.Recovered(ctx, p.Key(), audit.RefOf(obj), r)
			category, severity := audit.ClassOf(p)
			res = []audit.Result{{
				Policy:   p.Key().Name,
				Rule:     audit.RuleInternal,
				Category: category,
				Severity: severity,
				Verdict:  audit.Error,
				Message:  audit.PanicMessage(r),
				Resource: audit.RefOf(obj),
			}}
		}
	}()
	return p.Evaluate(ctx, gvr, obj)
}
