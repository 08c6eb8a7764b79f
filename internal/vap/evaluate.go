package vap

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/celaudit/celaudit/internal/audit"
)

// Property keys of this package's results, besides the shared ones in package audit.
const (
	// PropAuditAnnotationPrefix prefixes the key of each audit annotation the evaluation published.
	PropAuditAnnotationPrefix = "auditAnnotation."
	// PropMessageExpression says why a validation's messageExpression was not evaluated.
	PropMessageExpression = "messageExpression"
)

// maxAuditAnnotationValueLength is the apiserver's cap on an audit annotation value (validating/dispatcher.go).
const maxAuditAnnotationValueLength = 10 * 1024

// Evaluate implements audit.Policy. obj must have been read at gvr, one of Resources(); objects of other
// resources, and objects no binding applies to, yield no results. For a policy that expands pod templates
// (see expandingPodTemplates), the results on a workload are followed by those on its pod template.
func (p *Policy) Evaluate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) []audit.Result {
	if obj == nil {
		return nil
	}
	obj = withKind(obj, gvr, p.deps.Resolver)
	results := (&evaluation{p: p, ctx: ctx, obj: obj, ref: audit.RefOf(obj)}).run(gvr)
	if p.templates[gvr] {
		results = append(results, p.evaluateTemplate(ctx, gvr, obj)...)
	}
	audit.DistinctRules(results)
	return results
}

// run evaluates e.obj, read at gvr, with every binding that applies to it.
func (e *evaluation) run(gvr schema.GroupVersionResource) (results []audit.Result) {
	defer func() {
		if r := recover(); r != nil {
			audit.Recovered(e.ctx, e.p.Key(), e.ref, r)
			results = append(results, e.result(audit.RuleInternal, audit.Error, audit.PanicMessage(r), nil))
		}
	}()
	key := e.p.classKey(gvr)
	for _, b := range e.p.bindings {
		pl, ok := b.plans[key]
		if !ok || pl.Read != gvr {
			continue // not bound here, or evaluated when the object is read in another version
		}
		res, policyFailed := e.binding(b, pl)
		results = append(results, res...)
		if policyFailed {
			break // reported once per object, as the apiserver reports it once per request
		}
	}
	return results
}

// withKind returns obj with its apiVersion and kind set, filling them from the resource it was read at if
// they are missing (the matcher and CEL need them). obj itself is not modified.
func withKind(obj *unstructured.Unstructured, gvr schema.GroupVersionResource, resolver ResourceResolver) *unstructured.Unstructured {
	if !obj.GroupVersionKind().Empty() || resolver == nil {
		return obj
	}
	gvk := resolver.KindFor(gvr, "")
	if gvk.Empty() {
		return obj
	}
	out := &unstructured.Unstructured{Object: maps.Clone(obj.Object)}
	out.SetGroupVersionKind(gvk)
	return out
}

// evaluation is the state of one Evaluate call.
type evaluation struct {
	p   *Policy
	ctx context.Context
	obj *unstructured.Unstructured
	// ref is the object results are reported on: obj's, or for a pod template (obj is then the Pod made
	// from it) the workload's.
	ref audit.ObjectRef
	// template says that obj is a Pod made from the pod template of the workload ref: every result then
	// carries the property podTemplate.
	template bool
	// definitions are the matches made so far: a few at most (one per operation tried and request
	// resource), so a list searched in order is cheaper than a map made for every evaluation.
	definitions []definitionEntry
}

type definitionEntry struct {
	key   definitionKey
	match definitionMatch
}

type definitionKey struct {
	request schema.GroupVersionResource
	op      admission.Operation
}

type definitionMatch struct {
	attrs    admission.Attributes
	matches  bool
	resource schema.GroupVersionResource
	kind     schema.GroupVersionKind
	err      error
}

// definition matches the policy definition against the object requested at request with op.
func (e *evaluation) definition(request APIResource, op admission.Operation) definitionMatch {
	key := definitionKey{request: request.Resource, op: op}
	for _, d := range e.definitions {
		if d.key == key {
			return d.match
		}
	}
	d := definitionMatch{attrs: objectAttributes(e.obj, request, op)}
	d.matches, d.resource, d.kind, d.err = e.p.matcher.DefinitionMatches(d.attrs, e.p.objects,
		validating.NewValidatingAdmissionPolicyAccessor(e.p.compiled.policy))
	e.definitions = append(e.definitions, definitionEntry{key: key, match: d})
	return d
}

// objectAttributes describes the request the audit simulates: obj sent with op for resource r. The apiserver
// sets the namespace of a request for a Namespace to the namespace's name (create.go, requestinfo.go).
func objectAttributes(obj *unstructured.Unstructured, r APIResource, op admission.Operation) admission.Attributes {
	namespace := obj.GetNamespace()
	if r.Resource.Group == "" && r.Resource.Resource == "namespaces" {
		namespace = obj.GetName()
	}
	var object, oldObject runtime.Object
	switch op {
	case admission.Create:
		object = obj
	case admission.Update:
		object, oldObject = obj, obj
	case admission.Delete:
		oldObject = obj
	}
	return admission.NewAttributesRecord(object, oldObject, r.GroupVersionKind(), namespace, obj.GetName(), r.Resource,
		"", op, operationOptions(op), false, nil)
}

// binding evaluates one binding, as the apiserver's dispatcher does for one request. policyFailed reports an
// error of the policy itself, which ends the evaluation of the object.
func (e *evaluation) binding(b *boundBinding, pl Plan) (results []audit.Result, policyFailed bool) {
	base := b.properties()
	defer func() {
		if r := recover(); r != nil {
			audit.Recovered(e.ctx, e.p.Key(), e.ref, r)
			results = []audit.Result{e.result(audit.RuleInternal, audit.Error, audit.PanicMessage(r), e.errorProps(base))}
		}
	}()
	c := e.p.compiled
	match, op, stop, policyFailed := e.operation(b, pl, base)
	if stop != nil || op == "" {
		return stop, policyFailed
	}
	if op == admission.Delete {
		props := withProp(base, audit.PropOperation, string(op))
		return []audit.Result{e.result(RuleOperations, audit.Skip,
			"the binding applies to this object only on DELETE; stored objects are audited as CREATE or UPDATE", props)}, false
	}
	base[audit.PropOperation] = string(op)

	if e.p.paramsWithheld != nil && b.binding.Spec.ParamRef != nil {
		// Not read, so neither found nor missing: the binding cannot be evaluated, and says why.
		return []audit.Result{e.result(RuleConfiguration, audit.Error, "params not read: "+e.p.paramsWithheld.Error(), e.errorProps(base))}, false
	}
	if err := e.paramsFailing(b.binding.Spec.ParamRef, match.attrs.GetNamespace()); err != nil {
		return []audit.Result{e.result(RuleConfiguration, audit.Error, "params not read: "+err.Error(), e.errorProps(base))}, false
	}
	params, err := generic.CollectParams(c.policy.Spec.ParamKind, paramInformer{source: e.p.deps.Params, gvk: c.paramKindOrZero()},
		e.p.paramScope, b.binding.Spec.ParamRef, match.attrs.GetNamespace(), nil, nil)
	if err != nil {
		return []audit.Result{e.result(RuleConfiguration, audit.Error, "failed to configure binding: "+err.Error(), e.errorProps(base))}, false
	}
	if len(params) == 0 {
		return nil, false // parameterNotFoundAction Allow: the apiserver admits without evaluating
	}
	versioned, err := admission.NewVersionedAttributes(match.attrs, match.kind, e.p.objects)
	if err != nil {
		return []audit.Result{e.result(RuleConfiguration, audit.Error,
			fmt.Sprintf("failed to configure binding: failed to convert object version: %v", err), e.errorProps(base))}, false
	}
	namespace, err := e.namespace(match.attrs)
	if err != nil {
		return []audit.Result{e.result(RuleNamespace, audit.Error, err.Error(), e.errorProps(base))}, false
	}
	if c.matchConditionsSkip != "" && c.compileErr == nil {
		return []audit.Result{e.result(audit.RuleMatchConditions, audit.Skip, c.matchConditionsSkip, base)}, false
	}

	return e.evaluateParams(b, match, versioned, namespace, params, base), false
}

// evaluateParams evaluates the binding with each of its params in turn (one nil param for a policy without
// params), in the order of their names.
func (e *evaluation) evaluateParams(b *boundBinding, match definitionMatch, versioned *admission.VersionedAttributes,
	namespace *corev1.Namespace, params []runtime.Object, base map[string]string) (results []audit.Result) {
	c := e.p.compiled
	ev := c.plain
	if e.secret() {
		ev = c.secret
	}
	sortParams(params)
	for _, param := range params {
		props := maps.Clone(base)
		if param != nil {
			props[audit.PropParam] = paramName(param)
		}
		res := e.evaluateParam(b, ev, match, versioned, namespace, param, props)
		if c.paramsAreSecrets && param != nil {
			// The last guard for a Secret read as params, as the scanner's for an audited Secret.
			secretRedactor(param).Redact(res)
		}
		results = append(results, res...)
	}
	return results
}

// evaluateParam evaluates the binding with one param (nil for none) by the validator of ev.
func (e *evaluation) evaluateParam(b *boundBinding, ev evaluator, match definitionMatch, versioned *admission.VersionedAttributes,
	namespace *corev1.Namespace, param runtime.Object, props map[string]string,
) []audit.Result {
	c := e.p.compiled
	versionedParam := param
	if param != nil {
		u, isUnstructured := param.(*unstructured.Unstructured)
		switch {
		case param.GetObjectKind().GroupVersionKind().Empty():
			versionedParam = &wrappedParam{
				TypeMeta: paramTypeMeta(c.policy.Spec.ParamKind),
				nested:   param,
			}
		case isUnstructured:
			versionedParam = e.p.params.of(u)
		}
	}
	if c.compileErr != nil {
		// What the validator returns for a policy that did not compile.
		return []audit.Result{e.result(RuleCompile, audit.Error, c.compileErr.Error(), e.errorProps(props))}
	}
	if c.matcher != nil {
		m := c.matcher.Match(e.ctx, versioned, versionedParam, nil)
		if m.Error != nil {
			return []audit.Result{e.result(audit.RuleMatchConditions, audit.Error, c.matchError(m.Error, ev.withheld), e.errorProps(props))}
		}
		if !m.Matches {
			// A false condition (or, under failurePolicy Ignore, one that errors) excludes the object: the API
			// server admits the request without evaluating the validations and says nothing, and so does the
			// audit. A result here would be noise that grows with the cluster (one per excluded object).
			return nil
		}
	}
	v := ev.validator.Validate(e.ctx, match.resource, versioned, versionedParam, namespace, celconfig.RuntimeCELCostBudget, nil)
	return e.decide(b, ev, v, props)
}

// secretRedactor returns the redactor of the values of secret, a param of kind Secret.
func secretRedactor(secret runtime.Object) *audit.Redactor {
	if u, ok := secret.(*unstructured.Unstructured); ok {
		return audit.NewSecretRedactor(u.Object)
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(secret)
	if err != nil {
		// A typed Secret always converts. Were it to fail, the results keep what the first guard let
		// through: nothing computed from the params' sensitive fields.
		return nil
	}
	return audit.NewSecretRedactor(content)
}

// operation finds the first operation (CREATE, UPDATE, then DELETE) for which both the policy and the binding
// match the object; op is empty when none does. Configuration errors, of the policy (policyFailed) or of the
// binding, are returned as results.
func (e *evaluation) operation(b *boundBinding, pl Plan, base map[string]string) (
	match definitionMatch, op admission.Operation, errs []audit.Result, policyFailed bool,
) {
	for _, candidate := range []admission.Operation{admission.Create, admission.Update, admission.Delete} {
		// DELETE only decides whether to report a skip: its errors are not the audited request's.
		audited := candidate != admission.Delete
		d := e.definition(pl.Request, candidate)
		if d.err != nil && audited {
			return d, "", []audit.Result{e.result(RuleConfiguration, audit.Error, "failed to configure policy: "+d.err.Error(), e.errorProps(nil))}, true
		}
		if d.err != nil || !d.matches {
			continue
		}
		if audited && e.p.paramConfigErr != nil {
			return d, "", []audit.Result{e.result(RuleConfiguration, audit.Error, "failed to configure policy: "+e.p.paramConfigErr.Error(), e.errorProps(nil))}, true
		}
		ok, err := e.p.matcher.BindingMatches(d.attrs, e.p.objects, validating.NewValidatingAdmissionPolicyBindingAccessor(b.binding))
		if err != nil && audited {
			return d, "", []audit.Result{e.result(RuleConfiguration, audit.Error, "failed to configure binding: "+err.Error(), e.errorProps(base))}, false
		}
		if err == nil && ok {
			return d, candidate, nil, false
		}
	}
	return definitionMatch{}, "", nil, false
}

// namespace returns the namespace the namespaceObject variable shows, as the dispatcher fetches it.
func (e *evaluation) namespace(attrs admission.Attributes) (*corev1.Namespace, error) {
	name := attrs.GetNamespace()
	if gvk := attrs.GetKind(); gvk.Group == "" && gvk.Version == "v1" && gvk.Kind == "Namespace" {
		name = ""
	}
	if name == "" {
		return nil, nil
	}
	return e.p.matcher.GetNamespace(e.ctx, name)
}

// decide turns the decisions of ev's validator for one (binding, param) into results: its published audit
// annotations become properties of every result, each validation that denies or fails becomes a result, and
// a pass stands for the (binding, param) when nothing did.
func (e *evaluation) decide(b *boundBinding, ev evaluator, v validating.ValidateResult, props map[string]string) []audit.Result {
	c := e.p.compiled
	for _, a := range v.AuditAnnotations {
		if a.Action == validating.AuditAnnotationActionPublish {
			value := a.Value
			if len(value) > maxAuditAnnotationValueLength {
				value = value[:maxAuditAnnotationValueLength]
			}
			props[PropAuditAnnotationPrefix+a.Key] = value
		}
	}
	results, failed := e.validationResults(b, ev, v.Decisions, props)
	// The annotations ev evaluates read nothing it withholds: their errors are reported whole.
	for i, a := range v.AuditAnnotations {
		if a.Error == "" || i >= len(ev.annotations) {
			continue
		}
		index := ev.annotations[i]
		failed = true
		results = append(results, e.result(fmt.Sprintf("auditAnnotations[%d]", index), audit.Error, a.Error,
			e.errorProps(withProp(props, audit.PropRule, c.policy.Spec.AuditAnnotations[index].ValueExpression))))
	}
	if !failed && (len(c.judged) > 0 || len(c.validations) == 0) {
		results = append(results, e.result(RuleValidations, audit.Pass, c.passMessage, props))
	}
	return results
}

// validationResults returns the results of the validations, in spec order: a skip for each that cannot be
// judged, and one for each decision that denies or fails; failed says whether any did.
func (e *evaluation) validationResults(b *boundBinding, ev evaluator, decisions []validating.PolicyDecision,
	props map[string]string) (results []audit.Result, failed bool) {
	c := e.p.compiled
	// The validator returns one decision per validation it was given, or a single decision when the whole
	// evaluation failed (e.g. the cost budget ran out).
	if len(decisions) != len(c.judged) {
		for i, info := range c.validations {
			if info.skip != "" {
				results = append(results, e.result(fmt.Sprintf("validations[%d]", i), audit.Skip, info.skip, withProp(props, audit.PropRule, info.expression)))
			}
		}
		for _, d := range decisions {
			results = append(results, e.result(RuleValidations, audit.Error, withholdDetails(d.Message, "", ev.reads&ev.withheld), e.errorProps(props)))
		}
		return results, len(decisions) > 0
	}
	position := 0
	for i, info := range c.validations {
		// Most decisions are passes, which need neither: they are made only for a result.
		rule := func() string { return fmt.Sprintf("validations[%d]", i) }
		ruleProps := func() map[string]string { return withProp(props, audit.PropRule, info.expression) }
		if info.skip != "" {
			results = append(results, e.result(rule(), audit.Skip, info.skip, ruleProps()))
			continue
		}
		d := decisions[position]
		position++
		switch {
		case d.Evaluation == validating.EvalError:
			failed = true
			results = append(results, e.result(rule(), audit.Error, withholdDetails(d.Message, info.expression, info.reads&ev.withheld), e.errorProps(ruleProps())))
		case d.Action == validating.ActionDeny:
			failed = true
			results = append(results, e.denial(b, ev, info, d, rule(), ruleProps()))
		}
	}
	return results, failed
}

// denial is the result of validation info denying the object with decision d: fail when the binding denies,
// warn otherwise.
func (e *evaluation) denial(b *boundBinding, ev evaluator, info validationInfo, d validating.PolicyDecision, rule string,
	props map[string]string) audit.Result {
	verdict := audit.Warn
	if b.deny {
		verdict = audit.Fail
	}
	props[audit.PropReason] = string(d.Reason)
	if info.messageSkip != "" {
		props[PropMessageExpression] = info.messageSkip
	} else if info.hasMessageExpression && info.messageReads&ev.withheld != 0 {
		props[PropMessageExpression] = secretMessageSkip
	}
	return e.result(rule, verdict, d.Message, props)
}

// secretMessageSkip says why a result carries the static message rather than the messageExpression's, for a
// Secret (or with Secret params).
const secretMessageSkip = "not evaluated: it may read the data, stringData or annotations of a Secret, " +
	"which its output could disclose; the message is the one the API server falls back to"

// secret reports whether the evaluated object is a Secret: celaudit never copies what expressions compute
// from a Secret's data or annotations (messageExpressions, audit annotation values, error details) into a
// report.
func (e *evaluation) secret() bool {
	return isSecret(e.obj.GroupVersionKind())
}

// result is a result of the rule named base (see RuleName).
func (e *evaluation) result(base string, verdict audit.Verdict, message string, props map[string]string) audit.Result {
	c := e.p.compiled
	if e.template {
		props = withProp(props, audit.PropPodTemplate, "true")
	}
	return audit.Result{
		Policy:     c.key.Name,
		Rule:       e.ruleName(base, props),
		Category:   c.category,
		Severity:   c.severity,
		Verdict:    verdict,
		Message:    message,
		Properties: props,
		Resource:   e.ref,
	}
}

// Rule names of results that are not those of one validation, matchConditions or auditAnnotation.
const (
	// RuleValidations names the pass of an object that satisfies every validation evaluated, and the error of
	// an evaluation that failed as a whole (the cost budget ran out).
	RuleValidations = "validations"
	// RuleConfiguration names a configuration error of the policy (its paramKind, its matchConstraints) or of
	// a binding (a param not found, an object that cannot be converted to the version the policy reads).
	RuleConfiguration = audit.RuleConfiguration
	// RuleCompile names the error of a policy that does not compile.
	RuleCompile = "compile"
	// RuleNamespace names the error of a namespace that cannot be read for namespaceObject.
	RuleNamespace = "namespaceObject"
	// RuleOperations names the skip of an object a binding applies to only on DELETE.
	RuleOperations = "operations"
	// RulePodTemplate names the error of a workload whose pod template cannot be made into a Pod.
	RulePodTemplate = "podTemplate"
)

// ruleName is the rule name of a result of the rule named base (e.g. "validations[0]") with props: base,
// qualified by what tells apart the results of one rule on one object (see audit.RuleName), in this order:
//
//   - "binding <name>": an object may match several bindings of the policy. An AuditPolicy has one binding,
//     its own, and an unbound policy an implicit one: neither is named.
//   - "param <namespace>/<name>" (or "param <name>" for a cluster-scoped param): a binding whose paramRef
//     selects several params evaluates the object once per param.
//   - "pod template": the results of a workload's pod template are reported on the workload, beside those
//     of the workload itself.
//
// For example "validations[0] (binding replica-limits, param default/small, pod template)".
func (e *evaluation) ruleName(base string, props map[string]string) string {
	binding := ""
	if name := props[audit.PropBinding]; name != "" && e.p.compiled.key.Source != audit.SourceAuditPolicy {
		binding = "binding " + name
	}
	param := ""
	if name := props[audit.PropParam]; name != "" {
		param = "param " + name
	}
	template := ""
	if e.template {
		template = "pod template"
	}
	return audit.RuleName(base, binding, param, template)
}

// passMessage is the message of a pass after n validations were evaluated.
func passMessage(n int) string {
	switch n {
	case 0:
		return "object passes: the policy has no validations"
	case 1:
		return "object satisfies the 1 validation evaluated"
	}
	return fmt.Sprintf("object satisfies the %d validations evaluated", n)
}

// Category implements audit.Classified.
func (p *Policy) Category() string { return p.compiled.category }

// Severity implements audit.Classified.
func (p *Policy) Severity() string { return p.compiled.severity }

// errorProps returns props with the failurePolicy, which decides what the apiserver does with an error.
func (e *evaluation) errorProps(props map[string]string) map[string]string {
	return withProp(props, audit.PropFailurePolicy, string(e.p.compiled.failurePolicy))
}

// properties are those shared by every result of the binding.
func (b *boundBinding) properties() map[string]string {
	props := map[string]string{audit.PropValidationActions: b.actions}
	if b.name != "" {
		props[audit.PropBinding] = b.name
	}
	return props
}

// withProp returns a copy of props with key set to value.
func withProp(props map[string]string, key, value string) map[string]string {
	out := make(map[string]string, len(props)+1)
	maps.Copy(out, props)
	out[key] = value
	return out
}

func (c *Compiled) paramKindOrZero() schema.GroupVersionKind {
	if c.paramKind == nil {
		return schema.GroupVersionKind{}
	}
	return *c.paramKind
}

// paramTypeMeta is the TypeMeta the dispatcher gives typed params that lack one.
func paramTypeMeta(pk *admissionregistrationv1.ParamKind) (tm metav1.TypeMeta) {
	if pk != nil {
		tm.APIVersion, tm.Kind = pk.APIVersion, pk.Kind
	}
	return tm
}

// paramName is "namespace/name", or "name" for a cluster-scoped param.
func paramName(param runtime.Object) string {
	m, err := meta.Accessor(param)
	if err != nil {
		return ""
	}
	if m.GetNamespace() == "" {
		return m.GetName()
	}
	return m.GetNamespace() + "/" + m.GetName()
}

// sortParams orders params by namespace and name: listers return them in no particular order, and results
// must be deterministic.
func sortParams(params []runtime.Object) {
	slices.SortStableFunc(params, func(a, b runtime.Object) int {
		return strings.Compare(paramName(a), paramName(b))
	})
}

// paramsFailing returns why the params ref reads, for an object of namespace, cannot be read now (see
// ParamFailer), nil when they can or the binding reads none.
func (e *evaluation) paramsFailing(ref *admissionregistrationv1.ParamRef, namespace string) error {
	c := e.p.compiled
	failer, ok := e.p.deps.Params.(ParamFailer)
	if !ok || ref == nil || c.paramKind == nil || e.p.paramScope == nil {
		return nil
	}
	ns := ""
	if e.p.paramScope.Name() == meta.RESTScopeNameNamespace {
		ns = ref.Namespace
		if ns == "" {
			ns = namespace
		}
	}
	return failer.ParamsFailing(*c.paramKind, ns)
}
