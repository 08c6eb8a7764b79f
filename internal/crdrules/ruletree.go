package crdrules

import (
	"fmt"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	apiextensionscel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"
)

// ruleNode mirrors one node of the apiserver's CEL validator (apiextensions-apiserver
// pkg/apiserver/schema/cel.Validator): the same nodes, built by the same recursion from the same
// schema, with what each rule can print. The validator keeps its compiled rules private, so the rules
// are compiled a second time here; only their metadata is used, never their programs.
type ruleNode struct {
	// schemaPath is the node's place in the schema: "" for the root, "spec.items[*]", "spec.allOf[0]".
	schemaPath string
	// schema is the node's structural schema, whose type decides how a failing value is printed.
	schema *structuralschema.Structural
	// initErr is set when the node's rules could not be compiled at all; the validator then reports
	// one "rule compiler initialization error" for the node.
	initErr bool
	// initDetail is the detail of the node's initialization error, "" when its rules compiled.
	initDetail string
	rules      []ruleInfo

	items                *ruleNode
	additionalProperties *ruleNode
	properties           map[string]*ruleNode
	allOf                []*ruleNode
}

// ruleInfo is one x-kubernetes-validations rule and the texts the validator builds for it.
type ruleInfo struct {
	id    string
	order int
	index int
	rule  apiextensionsv1.ValidationRule
	// compileErr is the detail of the rule's compile error, "" when it compiled.
	compileErr string
	// evaluated is true for a rule the validator runs on CREATE: compiled, not empty, and not a
	// transition rule.
	evaluated bool
	// transition is true for a compiled rule using oldSelf without optionalOldSelf: never run on CREATE.
	transition bool
	// hasMessageExpression is true when the failure detail comes from a compiled messageExpression.
	hasMessageExpression bool
	// fieldPath is the rule's normalized fieldPath, "" when it reports on the node itself.
	fieldPath string
	// errorString names the rule in runtime error details (the validator's ruleErrorString).
	errorString string
	// message is the failure detail without messageExpression (the validator's ruleMessageOrDefault).
	message string
	// failureType is the type of the field error of a failure, from the rule's reason.
	failureType field.ErrorType
}

// buildRuleTree mirrors apiextensionscel.NewValidator(s, true, perCallLimit).
func buildRuleTree(s *structuralschema.Structural, perCallLimit uint64) *ruleNode {
	order := 0
	return buildRuleNode(s, s, model.SchemaDeclType(s, true), perCallLimit, "", &order)
}

// buildRuleNode mirrors the validator() recursion of the apiserver, node for node: the rules of the node,
// then those of its items, properties, additionalProperties and allOf branches, numbered in that order.
func buildRuleNode(validationSchema, nodeSchema *structuralschema.Structural, declType *apiservercel.DeclType, perCallLimit uint64, path string, order *int) *ruleNode {
	n := compileNodeRules(validationSchema, nodeSchema, declType, perCallLimit, path, order)
	var elemType *apiservercel.DeclType
	if declType != nil {
		elemType = declType.ElemType
	}
	if validationSchema.Items != nil && nodeSchema.Items != nil {
		n.items = buildRuleNode(validationSchema.Items, nodeSchema.Items, elemType, perCallLimit, path+"[*]", order)
	}
	if len(validationSchema.Properties) > 0 {
		n.properties = buildPropertyNodes(validationSchema, nodeSchema, declType, perCallLimit, path, order)
	}
	if validationSchema.AdditionalProperties != nil && validationSchema.AdditionalProperties.Structural != nil &&
		nodeSchema.AdditionalProperties != nil && nodeSchema.AdditionalProperties.Structural != nil {
		n.additionalProperties = buildRuleNode(validationSchema.AdditionalProperties.Structural, nodeSchema.AdditionalProperties.Structural,
			elemType, perCallLimit, path+"[*]", order)
	}
	if validationSchema.ValueValidation != nil {
		for i := range validationSchema.ValueValidation.AllOf {
			branch := buildRuleNode(nestedToStructural(&validationSchema.ValueValidation.AllOf[i]), nodeSchema, declType, perCallLimit,
				joinPath(path, fmt.Sprintf("allOf[%d]", i)), order)
			if branch != nil {
				n.allOf = append(n.allOf, branch)
			}
		}
	}

	if len(n.rules) > 0 || n.initErr || n.items != nil || n.additionalProperties != nil || len(n.properties) > 0 || len(n.allOf) > 0 {
		return n
	}
	return nil
}

// compileNodeRules compiles the rules validationSchema holds for the node at path, as the validator does,
// and returns the node with them.
func compileNodeRules(validationSchema, nodeSchema *structuralschema.Structural, declType *apiservercel.DeclType, perCallLimit uint64, path string, order *int) *ruleNode {
	compilationSchema := *nodeSchema
	compilationSchema.XValidations = validationSchema.XValidations
	compiled, err := apiextensionscel.Compile(&compilationSchema, declType, perCallLimit,
		environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()), apiextensionscel.StoredExpressionsEnvLoader())

	n := &ruleNode{schemaPath: path, schema: nodeSchema, initErr: err != nil, initDetail: initDetail(err)}
	for i, c := range compiled {
		rule := validationSchema.XValidations[i]
		info := ruleInfo{
			id:          ruleID(path, i),
			order:       *order,
			index:       i,
			rule:        rule,
			fieldPath:   c.NormalizedRuleFieldPath,
			errorString: ruleErrorString(rule),
			message:     ruleMessageOrDefault(rule),
			failureType: failureType(rule.Reason),
		}
		*order++
		switch {
		case c.Error != nil:
			info.compileErr = fmt.Sprintf("rule compile error: %v", c.Error)
		case c.Program == nil:
			// An empty rule: the validator ignores it.
		case c.UsesOldSelf && !ptr.Deref(rule.OptionalOldSelf, false):
			info.transition = true
		default:
			info.evaluated = true
			info.hasMessageExpression = c.MessageExpression != nil
		}
		n.rules = append(n.rules, info)
	}
	return n
}

// buildPropertyNodes returns, by name, the nodes of the properties of validationSchema that have rules,
// built in the order of their names as the validator walks them. A property whose CEL type cannot be derived
// is left out, as the validator leaves it.
func buildPropertyNodes(validationSchema, nodeSchema *structuralschema.Structural, declType *apiservercel.DeclType, perCallLimit uint64, path string, order *int) map[string]*ruleNode {
	out := map[string]*ruleNode{}
	for _, k := range sortedKeys(validationSchema.Properties) {
		validationProperty := validationSchema.Properties[k]
		nodeProperty, ok := nodeSchema.Properties[k]
		if !ok {
			continue
		}
		var fieldType *apiservercel.DeclType
		if escapedPropName, ok := apiservercel.Escape(k); ok {
			if declType == nil {
				continue
			}
			f, ok := declType.Fields[escapedPropName]
			if !ok {
				continue
			}
			fieldType = f.Type
		} else {
			fieldType = model.SchemaDeclType(&nodeProperty, nodeProperty.XEmbeddedResource)
			if fieldType == nil {
				continue
			}
		}
		if p := buildRuleNode(&validationProperty, &nodeProperty, fieldType, perCallLimit, joinPath(path, propertySegment(k)), order); p != nil {
			out[k] = p
		}
	}
	return out
}

// initDetail is the detail the validator reports for a node whose rules could not be compiled at all with
// err, "" for none.
func initDetail(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf("rule compiler initialization error: %v", err)
}

// problems appends to out, in the order the rules were built, what does not compile in n and below it: the
// node's initialization error and each rule's compile error, as "<rule ID>: <detail>" with the detail as the
// results show it.
func (n *ruleNode) problems(out []string) []string {
	if n == nil {
		return out
	}
	if n.initErr {
		out = append(out, joinPath(n.schemaPath, "x-kubernetes-validations")+": "+stableText(n.initDetail))
	}
	for i := range n.rules {
		if r := &n.rules[i]; r.compileErr != "" {
			out = append(out, r.id+": "+stableText(r.compileErr))
		}
	}
	out = n.items.problems(out)
	for _, k := range sortedKeys(n.properties) {
		out = n.properties[k].problems(out)
	}
	out = n.additionalProperties.problems(out)
	for _, b := range n.allOf {
		out = b.problems(out)
	}
	return out
}

// hasTransition reports whether n or a node below it has a transition rule.
func (n *ruleNode) hasTransition() bool {
	if n == nil {
		return false
	}
	for i := range n.rules {
		if n.rules[i].transition {
			return true
		}
	}
	if n.items.hasTransition() || n.additionalProperties.hasTransition() {
		return true
	}
	for _, p := range n.properties {
		if p.hasTransition() {
			return true
		}
	}
	for _, b := range n.allOf {
		if b.hasTransition() {
			return true
		}
	}
	return false
}

// nestedToStructural is the apiserver's conversion of an allOf branch into a schema to compile.
func nestedToStructural(nested *structuralschema.NestedValueValidation) *structuralschema.Structural {
	if nested == nil {
		return nil
	}
	s := &structuralschema.Structural{
		ValueValidation:      &nested.ValueValidation,
		ValidationExtensions: nested.ValidationExtensions,
		Generic:              nested.ForbiddenGenerics,
		Extensions:           nested.ForbiddenExtensions,
		Items:                nestedToStructural(nested.Items),
	}
	if len(nested.Properties) > 0 {
		s.Properties = make(map[string]structuralschema.Structural, len(nested.Properties))
		for k, v := range nested.Properties {
			s.Properties[k] = *nestedToStructural(&v)
		}
	}
	if nested.AdditionalProperties != nil {
		s.AdditionalProperties = &structuralschema.StructuralOrBool{Structural: nestedToStructural(nested.AdditionalProperties)}
	}
	return s
}

// ruleErrorString is the validator's name of a rule in error details.
func ruleErrorString(rule apiextensionsv1.ValidationRule) string {
	if len(rule.Message) > 0 {
		return strings.TrimSpace(rule.Message)
	}
	return strings.TrimSpace(rule.Rule)
}

// ruleMessageOrDefault is the validator's detail of a failure without messageExpression.
func ruleMessageOrDefault(rule apiextensionsv1.ValidationRule) string {
	if len(rule.Message) == 0 {
		return fmt.Sprintf("failed rule: %s", ruleErrorString(rule))
	}
	return strings.TrimSpace(rule.Message)
}

// failureType is the type of the field error the validator builds for a failure with this reason.
func failureType(reason *apiextensionsv1.FieldValueErrorReason) field.ErrorType {
	if reason == nil {
		return field.ErrorTypeInvalid
	}
	switch *reason {
	case apiextensionsv1.FieldValueForbidden:
		return field.ErrorTypeForbidden
	case apiextensionsv1.FieldValueRequired:
		return field.ErrorTypeRequired
	case apiextensionsv1.FieldValueDuplicate:
		return field.ErrorTypeDuplicate
	default:
		return field.ErrorTypeInvalid
	}
}

// ruleID is the identity of the i-th rule of the node at path.
func ruleID(path string, i int) string {
	return joinPath(path, "x-kubernetes-validations") + fmt.Sprintf("[%d]", i)
}

// ruleMarker starts the message of every rule of the marked schema, followed by the rule's identity.
const ruleMarker = "\x00celaudit-rule:"

// markRules rewrites, in place, every rule of s (and of its allOf branches) to report with a message
// naming it, without messageExpression or reason, so that each field error of a validator built from
// the result names the rule that printed it. Paths follow buildRuleNode.
func markRules(s *structuralschema.Structural, path string) {
	if s == nil {
		return
	}
	markRuleList(s.XValidations, path)
	markRules(s.Items, path+"[*]")
	for k, p := range s.Properties {
		markRules(&p, joinPath(path, propertySegment(k)))
		s.Properties[k] = p
	}
	if s.AdditionalProperties != nil {
		markRules(s.AdditionalProperties.Structural, path+"[*]")
	}
	if s.ValueValidation != nil {
		for i := range s.ValueValidation.AllOf {
			markNestedRules(&s.ValueValidation.AllOf[i], joinPath(path, fmt.Sprintf("allOf[%d]", i)))
		}
	}
}

func markNestedRules(n *structuralschema.NestedValueValidation, path string) {
	if n == nil {
		return
	}
	markRuleList(n.XValidations, path)
	markNestedRules(n.Items, path+"[*]")
	for k, p := range n.Properties {
		markNestedRules(&p, joinPath(path, propertySegment(k)))
		n.Properties[k] = p
	}
	markNestedRules(n.AdditionalProperties, path+"[*]")
	for i := range n.AllOf {
		markNestedRules(&n.AllOf[i], joinPath(path, fmt.Sprintf("allOf[%d]", i)))
	}
}

func markRuleList(rules apiextensionsv1.ValidationRules, path string) {
	for i := range rules {
		rules[i].Message = ruleMarker + ruleID(path, i)
		rules[i].MessageExpression = ""
		rules[i].Reason = nil
	}
}

func joinPath(path, segment string) string {
	if path == "" || strings.HasPrefix(segment, "[") {
		return path + segment
	}
	return path + "." + segment
}

// propertySegment writes a property name so that a rule identity stays unambiguous: names that
// would read as path syntax are quoted.
func propertySegment(name string) string {
	if name == "" || strings.ContainsAny(name, ".[]'* \t\n") {
		return "['" + strings.ReplaceAll(name, "'", `\'`) + "']"
	}
	return name
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// occurrence is one place in an object where a node's rules are evaluated.
type occurrence struct {
	node  *ruleNode
	path  *field.Path
	value interface{}
}

// collectOccurrences walks obj the way the validator does (validate, validateMap, validateArray) and
// returns every place where a node's rules run, in a deterministic order.
func collectOccurrences(root *ruleNode, obj interface{}) []occurrence {
	var out []occurrence
	var walk func(n *ruleNode, path *field.Path, v interface{})
	walk = func(n *ruleNode, path *field.Path, v interface{}) {
		if n == nil || v == nil {
			return
		}
		out = append(out, occurrence{node: n, path: path, value: v})
		for _, b := range n.allOf {
			walk(b, path, v)
		}
		switch v := v.(type) {
		case []interface{}:
			if n.items != nil {
				for i := range v {
					walk(n.items, path.Index(i), v[i])
				}
			}
		case map[string]interface{}:
			keys := sortedKeys(v)
			if n.additionalProperties != nil {
				for _, k := range keys {
					walk(n.additionalProperties, path.Key(k), v[k])
				}
			}
			if n.properties != nil {
				for _, k := range keys {
					if sub, ok := n.properties[k]; ok {
						walk(sub, path.Child(k), v[k])
					}
				}
			}
		}
	}
	walk(root, nil, obj)
	return out
}
