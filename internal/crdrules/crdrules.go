package crdrules

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/celaudit/celaudit/internal/audit"
)

// DefaultCategory is the category of results when neither the options nor the CRD name one.
const DefaultCategory = "CRD Validation"

// Rule identities of findings that no single x-kubernetes-validations rule produced.
const (
	// RuleIDSchema names the OpenAPI checks (types, formats, patterns, enums, bounds, required fields,
	// list types, embedded resources, metadata) and problems building the version's validation.
	RuleIDSchema = "schema"
	// RuleIDValidations names CEL findings that belong to no single rule: the rules not run because
	// the object failed blocking schema checks, and errors no rule of the schema can have produced.
	RuleIDValidations = "x-kubernetes-validations"
	// RulePass names the pass of an object that satisfies the whole validation of a version.
	RulePass = "validation"
)

// Options tune compilation. The zero value gives the apiserver's defaults.
type Options struct {
	// PerCallLimit bounds the runtime cost of one evaluation of one rule. Default celconfig.PerCallLimit.
	PerCallLimit uint64
	// RuntimeCostBudget bounds the runtime cost of all rules for one object, as the apiserver does per
	// request. Default celconfig.RuntimeCELCostBudget.
	RuntimeCostBudget int64
	// Category of the results. Default DefaultCategory; the CRD annotation celaudit.io/category wins.
	Category string
	// Severity of the results. Default audit.SeverityMedium; the CRD annotation celaudit.io/severity wins
	// when it holds one of the PolicyReport severities (see audit.ParseAnnotations).
	Severity string
}

// withDefaults returns the options with every zero field replaced by the apiserver's default.
func (o Options) withDefaults() Options {
	if o.PerCallLimit == 0 {
		o.PerCallLimit = celconfig.PerCallLimit
	}
	if o.RuntimeCostBudget == 0 {
		o.RuntimeCostBudget = celconfig.RuntimeCELCostBudget
	}
	if o.Category == "" {
		o.Category = DefaultCategory
	}
	if o.Severity == "" {
		o.Severity = audit.SeverityMedium
	}
	return o
}

// Finding is one outcome of validating one object in one version: a field error the apiserver would
// return, or a rule that cannot be judged on a stored object.
type Finding struct {
	// RuleID identifies the rule: for a CEL rule its schema path and index, e.g.
	// "spec.x-kubernetes-validations[0]" or "spec.items[*].x-kubernetes-validations[1]" ("[*]" stands for
	// the items of a list and the values of a map, ".allOf[i]" for an allOf branch); the node's path and
	// "x-kubernetes-validations" without index for an error of a node's rules as a whole (they could not
	// be compiled, or ran out of cost budget at a rule that cannot be told); RuleIDSchema for the OpenAPI
	// checks; RuleIDValidations for CEL findings of no single node.
	RuleID string
	// Rule is the CEL expression, empty for schema checks.
	Rule string
	// Message is the field error exactly as the apiserver prints it (field.Error.Error()), or for a skip
	// the reason the rule was not judged. One part is made stable: the name the apiserver generates
	// for the type of self at each compilation ("selfType123456789", printed by compile errors) is
	// written "selfType".
	Message string
	// FieldPath is the path of the field error ("" for the object itself).
	FieldPath string
	// Reason is the field error type, e.g. "FieldValueInvalid" or "FieldValueForbidden".
	Reason string
	// Verdict is fail for a rule or check the object breaks, error for a rule that could not be
	// evaluated (compile or runtime error, cost limit) and skip for a rule that was not evaluated.
	Verdict audit.Verdict
	// FieldError is true when Message is one of the field errors the apiserver lists when it rejects
	// the object (`<Kind>.<group> "<name>" is invalid: [...]`); false for findings only an audit makes,
	// such as skipped transition rules. The apiserver prints identical field errors once.
	FieldError bool
}

// Policy is the compiled validation of one CRD: every served version with a schema.
type Policy struct {
	name      string
	group     string
	plural    string
	category  string
	severity  string
	versions  map[string]*versionPolicy
	resources []schema.GroupVersionResource
}

var _ audit.Policy = &Policy{}

// Compile builds the audit policy of crd. Compile once per CRD uid and generation: it compiles every
// rule. Problems building a version (a schema that is not structural, a rule that does not compile)
// never fail Compile; they surface as error findings of that version's objects.
func Compile(crd *apiextensionsv1.CustomResourceDefinition, opts Options) *Policy {
	opts = opts.withDefaults()
	p := &Policy{
		category: opts.Category,
		severity: opts.Severity,
		versions: map[string]*versionPolicy{},
	}
	if crd == nil {
		return p
	}
	p.name = crd.Name
	p.group = crd.Spec.Group
	p.plural = crd.Spec.Names.Plural
	ann := audit.ParseAnnotations(crd.Annotations)
	p.category = ann.CategoryOr(p.category)
	p.severity = ann.SeverityOr(p.severity)
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if !v.Served || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		if _, dup := p.versions[v.Name]; dup {
			continue
		}
		p.versions[v.Name] = compileVersion(crd, v.Name, opts)
		p.resources = append(p.resources, schema.GroupVersionResource{Group: p.group, Version: v.Name, Resource: p.plural})
	}
	sort.Slice(p.resources, func(i, j int) bool { return p.resources[i].Version < p.resources[j].Version })
	return p
}

// Problems lists what in the CRD's validation does not compile, by served version (sorted): a version whose
// validation cannot be built, and each x-kubernetes-validations rule that fails to compile, as
// "version <v>, <rule ID>: <error>" with the error as the results show it. Nil when everything compiled. The
// API server rejects such rules when a CRD is written, so they come from a CRD stored under other rules:
// another Kubernetes version, or a CRD read from a file.
func (p *Policy) Problems() []string {
	var out []string
	for _, gvr := range p.resources {
		vp := p.versions[gvr.Version]
		if vp.buildErr != nil {
			out = append(out, fmt.Sprintf("cannot validate version %s: %v", vp.version, vp.buildErr))
			continue
		}
		for _, problem := range vp.rules.problems(nil) {
			out = append(out, fmt.Sprintf("version %s, %s", vp.version, problem))
		}
	}
	return out
}

// Key identifies the policy among every source.
func (p *Policy) Key() audit.PolicyKey { return audit.CRDKey(p.name) }

// Resources lists every served version whose schema has validation, sorted by version.
func (p *Policy) Resources() []schema.GroupVersionResource {
	return append([]schema.GroupVersionResource(nil), p.resources...)
}

// Evaluate returns the results for obj read at gvr: one per finding, or a single pass when the object
// neither fails nor errors on any rule. It returns nothing for a resource the policy does not cover.
func (p *Policy) Evaluate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	if obj == nil || gvr.Group != p.group || gvr.Resource != p.plural {
		return nil
	}
	if _, ok := p.versions[gvr.Version]; !ok {
		return nil
	}
	findings := p.Findings(ctx, gvr.Version, obj)
	ref := audit.RefOf(obj)
	results := make([]audit.Result, 0, len(findings)+1)
	passed := true
	for _, f := range findings {
		if f.Verdict == audit.Fail || f.Verdict == audit.Error {
			passed = false
		}
		props := map[string]string{audit.PropCRDVersion: gvr.Version}
		if f.FieldPath != "" {
			props[audit.PropFieldPath] = f.FieldPath
		}
		if f.Reason != "" {
			props[audit.PropReason] = f.Reason
		}
		if f.Rule != "" {
			props[audit.PropRule] = f.Rule
		}
		results = append(results, audit.Result{
			Policy:     p.name,
			Rule:       RuleName(f, gvr.Version),
			Category:   p.category,
			Severity:   p.severity,
			Verdict:    f.Verdict,
			Message:    f.Message,
			Properties: props,
			Resource:   ref,
		})
	}
	if passed {
		results = append(results, audit.Result{
			Policy:     p.name,
			Rule:       audit.RuleName(RulePass, versionQualifier(gvr.Version)),
			Category:   p.category,
			Severity:   p.severity,
			Verdict:    audit.Pass,
			Message:    fmt.Sprintf("object satisfies the validation of %s %s", p.name, gvr.Version),
			Properties: map[string]string{audit.PropCRDVersion: gvr.Version},
			Resource:   ref,
		})
	}
	audit.DistinctRules(results)
	return results
}

// RuleName is the rule name of f's result on an object read in version (see audit.RuleName): the rule ID,
// qualified so that the findings of one object have distinct names.
//
//   - An OpenAPI check is named by the field and the error type: "schema: spec.replicas (Invalid value,
//     version v1)", or "schema (Internal error, version v1)" for the object as a whole.
//   - A rule of list items or map values ("[*]" in its ID) fails once per item: its field errors name the
//     item, "spec.items[*].x-kubernetes-validations[0] (at spec.items[1], version v1)".
//   - Every other finding is its rule ID and version: "spec.x-kubernetes-validations[0] (version v1)".
//
// The version tells apart the results of an object read in several served versions. Findings still alike
// (two errors of one type on one field) are numbered by the policy (see audit.DistinctRules).
func RuleName(f Finding, version string) string {
	switch {
	case f.RuleID == RuleIDSchema:
		base := RuleIDSchema
		if f.FieldPath != "" {
			base += ": " + f.FieldPath
		}
		reason := ""
		if f.Reason != "" {
			reason = field.ErrorType(f.Reason).String()
		}
		return audit.RuleName(base, reason, versionQualifier(version))
	case f.FieldError && f.FieldPath != "" && strings.Contains(f.RuleID, "[*]"):
		return audit.RuleName(f.RuleID, "at "+f.FieldPath, versionQualifier(version))
	}
	return audit.RuleName(f.RuleID, versionQualifier(version))
}

func versionQualifier(version string) string { return "version " + version }

// Category implements audit.Classified.
func (p *Policy) Category() string { return p.category }

// Severity implements audit.Classified.
func (p *Policy) Severity() string { return p.severity }

// Findings validates obj as the given version of the CRD, with the semantics of a CREATE, and returns
// the findings sorted by field path, rule and message. It returns nil for a version the policy does
// not cover and no findings for an object that passes.
func (p *Policy) Findings(ctx context.Context, version string, obj *unstructured.Unstructured) []Finding {
	vp, ok := p.versions[version]
	if !ok {
		return nil
	}
	return vp.findings(ctx, obj)
}
