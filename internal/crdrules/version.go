package crdrules

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	apiextensionscel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/celaudit/celaudit/internal/audit"
)

// Message of the skip finding of a transition rule.
const transitionSkipMessage = "transition rule (uses oldSelf) is only evaluated on update; a stored object has no previous version"

// schemaValidator is what the CRD strategy offers: the checks of a CREATE other than CEL.
type schemaValidator interface {
	Validate(ctx context.Context, obj runtime.Object) field.ErrorList
}

// versionPolicy is the compiled validation of one version of a CRD.
type versionPolicy struct {
	version string
	// key is the CRD's policy key, which names it to the panic handler of an evaluation that panics.
	key audit.PolicyKey
	// buildErr is set when the version's validation could not be built; every object then gets one
	// error finding carrying it.
	buildErr error
	// schema runs the apiserver's strategy on a copy of the schema without CEL rules: type meta,
	// metadata, OpenAPI, scale, embedded resources and list types, exactly as a CREATE.
	schema schemaValidator
	// structural is the version's structural schema, with its rules.
	structural *structuralschema.Structural
	// cel is the apiserver's CEL validator of the schema; nil when the schema has no rules.
	cel *apiextensionscel.Validator
	// rules mirrors cel with each rule's identity, for attributing field errors and finding
	// transition rules.
	rules *ruleNode
	// hasTransition is true when some rule is a transition rule.
	hasTransition bool
	// budget is the runtime cost budget of one object.
	budget       int64
	perCallLimit uint64

	// marked is a validator of the same rules whose messages name them, built on first need: it
	// settles which rule printed an error when several could have (see attribute).
	markedOnce       sync.Once
	marked           *apiextensionscel.Validator
	markedStructural *structuralschema.Structural
}

// compileVersion builds the validation of one version as the apiserver's CRD handler does.
func compileVersion(crd *apiextensionsv1.CustomResourceDefinition, version string, opts Options) (vp *versionPolicy) {
	vp = &versionPolicy{version: version, key: audit.CRDKey(crd.Name), budget: opts.RuntimeCostBudget, perCallLimit: opts.PerCallLimit}
	defer func() {
		if r := recover(); r != nil {
			vp.buildErr = fmt.Errorf("panic building the validation: %v", r)
		}
	}()

	internal, structural, err := versionSchema(crd, version)
	if err != nil {
		vp.buildErr = err
		return vp
	}
	openAPIValidator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		vp.buildErr = fmt.Errorf("building the OpenAPI validator: %w", err)
		return vp
	}
	scale, err := scaleSubresource(crd, version)
	if err != nil {
		vp.buildErr = err
		return vp
	}

	kindName := crd.Status.AcceptedNames.Kind
	if kindName == "" {
		kindName = crd.Spec.Names.Kind
	}
	kind := schema.GroupVersionKind{Group: crd.Spec.Group, Version: version, Kind: kindName}

	// The strategy compiles its own CEL validator with fixed limits; give it the schema without rules so
	// that CEL runs once, below, with the configured limits, and the strategy does everything else.
	withoutRules := structural.DeepCopy()
	stripValidations(withoutRules)
	vp.schema = customresource.NewStrategy(nil, crd.Spec.Scope == apiextensionsv1.NamespaceScoped, kind,
		openAPIValidator, nil, withoutRules, nil, scale, nil)

	vp.structural = structural
	vp.cel = apiextensionscel.NewValidator(structural, true, opts.PerCallLimit)
	if vp.cel != nil {
		vp.rules = buildRuleTree(structural, opts.PerCallLimit)
		vp.hasTransition = vp.rules.hasTransition()
	}
	return vp
}

// versionSchema returns the schema of version of crd, in the internal version, and its structural form.
func versionSchema(crd *apiextensionsv1.CustomResourceDefinition, version string) (
	*apiextensionsinternal.CustomResourceValidation, *structuralschema.Structural, error) {
	val, err := apihelpers.GetSchemaForVersion(crd, version)
	if err != nil {
		return nil, nil, fmt.Errorf("getting the schema: %w", err)
	}
	internal := &apiextensionsinternal.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(val, internal, nil); err != nil {
		return nil, nil, fmt.Errorf("converting the schema to the internal version: %w", err)
	}
	structural, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, nil, fmt.Errorf("the schema is not structural: %w", err)
	}
	return internal, structural, nil
}

// scaleSubresource returns the scale subresource of version of crd, in the internal version; nil when it
// has none.
func scaleSubresource(crd *apiextensionsv1.CustomResourceDefinition, version string) (*apiextensionsinternal.CustomResourceSubresourceScale, error) {
	subresources, err := apihelpers.GetSubresourcesForVersion(crd, version)
	if err != nil {
		return nil, fmt.Errorf("getting the subresources: %w", err)
	}
	if subresources == nil || subresources.Scale == nil {
		return nil, nil
	}
	scale := &apiextensionsinternal.CustomResourceSubresourceScale{}
	if err := apiextensionsv1.Convert_v1_CustomResourceSubresourceScale_To_apiextensions_CustomResourceSubresourceScale(subresources.Scale, scale, nil); err != nil {
		return nil, fmt.Errorf("converting the scale subresource: %w", err)
	}
	return scale, nil
}

// stripValidations removes the x-kubernetes-validations of the structural spine, which is where the
// CEL validator looks for rules.
func stripValidations(s *structuralschema.Structural) {
	if s == nil {
		return
	}
	s.XValidations = nil
	stripValidations(s.Items)
	if s.AdditionalProperties != nil {
		stripValidations(s.AdditionalProperties.Structural)
	}
	for k, p := range s.Properties {
		stripValidations(&p)
		s.Properties[k] = p
	}
}

// findings runs the validation of a CREATE of obj once and turns its field errors into findings.
func (vp *versionPolicy) findings(ctx context.Context, obj *unstructured.Unstructured) []Finding {
	if vp.buildErr != nil {
		return []Finding{internalFinding(RuleIDSchema, fmt.Sprintf("cannot validate version %s: %v", vp.version, vp.buildErr))}
	}
	if obj == nil || obj.Object == nil {
		return []Finding{internalFinding(RuleIDSchema, "cannot validate an empty object")}
	}
	u := &unstructured.Unstructured{Object: forValidation(obj.Object)}

	var out []Finding
	errs, panicked := vp.validateSchema(ctx, u)
	if panicked != nil {
		out = append(out, *panicked)
	}
	for _, e := range errs {
		out = append(out, fromFieldError(e, RuleIDSchema, "", audit.Fail))
	}

	if vp.cel != nil {
		if blocking, e := hasBlockingErr(errs); blocking {
			f := fromFieldError(e, RuleIDValidations, "", audit.Skip)
			out = append(out, f)
		} else {
			out = append(out, vp.validateCEL(ctx, u)...)
		}
		if vp.hasTransition {
			out = append(out, vp.transitionSkips(u.Object)...)
		}
	}
	return sortFindings(out)
}

// validateSchema runs the strategy's checks, turning a panic into an error finding.
func (vp *versionPolicy) validateSchema(ctx context.Context, u *unstructured.Unstructured) (errs field.ErrorList, panicked *Finding) {
	defer func() {
		if r := recover(); r != nil {
			audit.Recovered(ctx, vp.key, audit.RefOf(u), r)
			f := internalFinding(RuleIDSchema, fmt.Sprintf("schema validation panicked: %v", r))
			errs, panicked = nil, &f
		}
	}()
	return vp.schema.Validate(ctx, u), nil
}

// validateCEL runs every rule once over the whole object with the per-object budget, as a CREATE
// does, and attributes each field error to the rule that produced it.
func (vp *versionPolicy) validateCEL(ctx context.Context, u *unstructured.Unstructured) (out []Finding) {
	defer func() {
		if r := recover(); r != nil {
			audit.Recovered(ctx, vp.key, audit.RefOf(u), r)
			out = []Finding{internalFinding(RuleIDValidations, fmt.Sprintf("CEL validation panicked: %v", r))}
		}
	}()
	errs, _ := vp.cel.Validate(ctx, nil, vp.structural, u.Object, nil, vp.budget)
	if len(errs) == 0 {
		return nil
	}
	return attribute(vp.rules, u.Object, errs, func() map[string]bool { return vp.markedRun(ctx, u.Object) })
}

// markedRun validates obj with the marked rules (see markRules) and returns the "field\x00ruleID"
// pairs of the rules that reported an error. It only names rules: its messages are never shown.
func (vp *versionPolicy) markedRun(ctx context.Context, obj map[string]interface{}) (confirmed map[string]bool) {
	defer func() {
		if r := recover(); r != nil {
			confirmed = nil
		}
	}()
	vp.markedOnce.Do(func() {
		s := vp.structural.DeepCopy()
		markRules(s, "")
		vp.markedStructural = s
		vp.marked = apiextensionscel.NewValidator(s, true, vp.perCallLimit)
	})
	if vp.marked == nil {
		return nil
	}
	errs, _ := vp.marked.Validate(ctx, nil, vp.markedStructural, obj, nil, vp.budget)
	confirmed = make(map[string]bool, len(errs))
	for _, e := range errs {
		if i := strings.LastIndex(e.Detail, ruleMarker); i >= 0 {
			confirmed[e.Field+"\x00"+e.Detail[i+len(ruleMarker):]] = true
		}
	}
	return confirmed
}

// transitionSkips reports each transition rule whose schema node is present in the object once.
func (vp *versionPolicy) transitionSkips(obj map[string]interface{}) (out []Finding) {
	defer func() {
		if r := recover(); r != nil {
			out = []Finding{internalFinding(RuleIDValidations, fmt.Sprintf("finding transition rules panicked: %v", r))}
		}
	}()
	seen := map[*ruleInfo]bool{}
	for _, occ := range collectOccurrences(vp.rules, obj) {
		for i := range occ.node.rules {
			r := &occ.node.rules[i]
			if !r.transition || seen[r] {
				continue
			}
			seen[r] = true
			out = append(out, Finding{
				RuleID:    r.id,
				Rule:      r.rule.Rule,
				Message:   transitionSkipMessage,
				FieldPath: pathString(occ.path),
				Verdict:   audit.Skip,
			})
		}
	}
	return out
}

// hasBlockingErr is the apiserver's rule (customResourceStrategy): errors of these types stop CEL
// rules from running, because the rules could not rely on the schema.
func hasBlockingErr(errs field.ErrorList) (bool, *field.Error) {
	for _, err := range errs {
		if err.Type == field.ErrorTypeNotSupported || err.Type == field.ErrorTypeRequired || err.Type == field.ErrorTypeTooLong || err.Type == field.ErrorTypeTooMany || err.Type == field.ErrorTypeTypeInvalid {
			return true, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")
		}
	}
	return false, nil
}

// fromFieldError turns an apiserver field error into a finding.
func fromFieldError(e *field.Error, ruleID, rule string, verdict audit.Verdict) Finding {
	return Finding{
		RuleID:     ruleID,
		Rule:       rule,
		Message:    e.Error(),
		FieldPath:  fieldPathOf(e),
		Reason:     string(e.Type),
		Verdict:    verdict,
		FieldError: true,
	}
}

// fieldPathOf returns the path of e, "" for the object itself (which the apiserver prints "<nil>").
func fieldPathOf(e *field.Error) string {
	if e.Field == "<nil>" {
		return ""
	}
	return e.Field
}

func pathString(p *field.Path) string {
	if p == nil {
		return ""
	}
	return p.String()
}

// internalFinding is an error finding for a problem of the audit itself, not a field error.
func internalFinding(ruleID, msg string) Finding {
	return Finding{RuleID: ruleID, Message: msg, Reason: string(field.ErrorTypeInternal), Verdict: audit.Error}
}

// sortFindings orders findings deterministically (the validators walk maps in random order) and drops
// exact duplicates.
func sortFindings(fs []Finding) []Finding {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.FieldPath != b.FieldPath {
			return a.FieldPath < b.FieldPath
		}
		if a.RuleID != b.RuleID {
			return a.RuleID < b.RuleID
		}
		if a.Message != b.Message {
			return a.Message < b.Message
		}
		if a.Verdict != b.Verdict {
			return a.Verdict < b.Verdict
		}
		return a.Reason < b.Reason
	})
	out := make([]Finding, 0, len(fs))
	for _, f := range fs {
		if len(out) > 0 && f == out[len(out)-1] {
			continue
		}
		out = append(out, f)
	}
	return out
}
