package mutate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/celaudit/celaudit/internal/audit"
)

// MaxPatchBytes is the size of the patch a Result carries in Patch: enough for the few fields a policy
// typically sets, small enough that thousands of results fit in a report. FullPatch has all of it.
const MaxPatchBytes = 4096

// Result is the verdict of one policy on one object.
type Result struct {
	// Policy is the name of the MutatingAdmissionPolicy.
	Policy string
	// Verdict is audit.Pass when the policy applies and leaves the object as it is, audit.Warn when it would
	// change it (the object has drifted from what the policy makes of it) and audit.Error when the API server
	// would fail the policy on this object (see Message).
	Verdict audit.Verdict
	// Message names the fields the policy would change, or is the API server's error.
	Message string
	// Operation is the request the object was judged as: admission.Update or admission.Create.
	Operation admission.Operation
	// FailurePolicy is the policy's failurePolicy: with Fail an error refuses the request, with Ignore the
	// API server admits the object without the policy's changes.
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// Fields are the fields the policy would change, in patch order (e.g. metadata.labels.team).
	Fields []string
	// Patch is the RFC 6902 JSON patch of the policy's changes, applied to the object as the policies before
	// it left it, cut to MaxPatchBytes (PatchTruncated then says so). A Secret's values are redacted.
	Patch          string
	PatchTruncated bool
	// FullPatch is the whole patch of the policy's changes.
	FullPatch []Operation
}

// Outcome is what the policies make of one object on the request it is judged as.
type Outcome struct {
	// Operation is the request judged: an UPDATE of the stored object when some policy and binding match
	// UPDATE for it, else a CREATE when some match CREATE, else "" (no policy applies; Results is empty).
	Operation admission.Operation
	// Results holds one Result per policy that applies to the object, in evaluation order.
	Results []Result
	// Denied is the API server's message when it would refuse the request: a policy with failurePolicy Fail
	// failed on it. Patch is then empty: the request changes nothing.
	Denied string
	// Patch turns the stored object into the object as the policies leave it (nil when they leave it as it
	// is or Denied is set). A Secret's values are redacted.
	Patch []Operation
	// object is the object as the policies leave it, unredacted, set with Patch (see Object).
	object map[string]any
}

// Object returns a copy of the object as the policies leave it, in the version of the object evaluated, nil
// when they leave it as it is or the API server would refuse the request (Denied). It is the real object, not
// one rebuilt from the redacted Patch: the API server validates it after mutating admission (kubectl celaudit
// check judges it so). A Secret's values are in it: whoever reports on it must redact them.
func (o Outcome) Object() *unstructured.Unstructured {
	if o.object == nil {
		return nil
	}
	return &unstructured.Unstructured{Object: runtime.DeepCopyJSON(o.object)}
}

// Evaluate judges obj, a stored object read at gvr, as the API server's MutatingAdmissionPolicy plugin would
// judge the next request to write it: an UPDATE with object and oldObject both the stored object when some
// policy and binding match UPDATE for it, else a CREATE of it (a re-create would get that). The policies run
// as the plugin runs them, reinvoked once when one asks for it (reinvocationPolicy: IfNeeded) and a later one
// changed the object. Other mutating admission (webhooks, built-in plugins) is not run.
//
// Evaluate never fails: what the API server would refuse is an error result, and obj is not modified.
func (s *Set) Evaluate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) Outcome {
	return s.evaluate(ctx, gvr, obj, false)
}

// EvaluateCreate judges obj as the CREATE of a new object, as the API server judges `kubectl apply` of an
// object it does not hold yet (kubectl celaudit check judges manifests so): policies whose bindings match only
// UPDATE do not apply. Otherwise it is Evaluate.
func (s *Set) EvaluateCreate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) Outcome {
	return s.evaluate(ctx, gvr, obj, true)
}

// operations returns the requests an object may be judged as, in order of preference: a stored object meets
// the policies on its next UPDATE, else on a re-create; a new object (create) on its CREATE.
func operations(create bool) []admission.Operation {
	if create {
		return []admission.Operation{admission.Create}
	}
	return []admission.Operation{admission.Update, admission.Create}
}

func (s *Set) evaluate(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, create bool) (out Outcome) {
	defer func() {
		if r := recover(); r != nil {
			message := fmt.Sprintf("internal error evaluating mutating admission policies: %v", r)
			for i := range out.Results {
				out.Results[i] = Result{Policy: out.Results[i].Policy, Operation: out.Operation,
					FailurePolicy: out.Results[i].FailurePolicy, Verdict: audit.Error, Message: message}
			}
			out.Denied, out.Patch, out.object = message, nil, nil
		}
	}()
	if len(s.hooks) == 0 || exempt(gvr.GroupResource()) {
		return Outcome{}
	}
	gvk := obj.GroupVersionKind()
	o := s.types.objectInterfaces(gvk, s.deps.Resolver)
	e := &evaluation{set: s, gvr: gvr, gvk: gvk, stored: obj, o: o, ops: operations(create)}
	out.Operation, out.Results = e.operation()
	if out.Operation == "" {
		return Outcome{}
	}
	if k, ok := s.types.custom[gvk]; ok && k.err != nil {
		return e.failAll(out, k.err.Error())
	}
	attrs, err := e.attributes(out.Operation)
	if err != nil {
		return e.failAll(out, err.Error())
	}

	rec := &recorder{}
	dctx := context.WithValue(ctx, recorderKey{}, rec)
	errs := map[string][]string{}
	denied := e.dispatch(dctx, attrs, errs)
	if denied == "" && attrs.GetReinvocationContext().ShouldReinvoke() {
		// The admission chain's reinvoker (k8s.io/apiserver/pkg/admission/reinvocation.go).
		attrs.GetReinvocationContext().SetIsReinvoke()
		denied = e.dispatch(dctx, attrs, errs)
	}
	final, err := e.final(attrs)
	if err != nil {
		return e.failAll(out, err.Error())
	}
	return e.outcome(out, rec, final, errs, denied)
}

// evaluation is one object's evaluation.
type evaluation struct {
	set    *Set
	gvr    schema.GroupVersionResource
	gvk    schema.GroupVersionKind
	stored *unstructured.Unstructured
	o      admission.ObjectInterfaces
	// ops are the requests the object may be judged as, the first that some policy matches.
	ops []admission.Operation
}

// operation returns the request the object is judged as, and an empty result for each policy that some of
// its bindings match for it (they are filled in by outcome).
func (e *evaluation) operation() (admission.Operation, []Result) {
	for _, op := range e.ops {
		attrs := e.matchAttributes(op)
		var matched []Result
		for _, h := range e.set.hooks {
			if e.matches(attrs, h) {
				matched = append(matched, Result{Policy: h.Policy.Name, Operation: op, FailurePolicy: e.set.failurePolicy[h.Policy.Name]})
			}
		}
		if len(matched) > 0 {
			return op, matched
		}
	}
	return "", nil
}

// matches reports whether the policy's matchConstraints and one of its bindings match the request, as the
// dispatcher decides it. An error in matching counts as a match: the dispatcher reports it.
func (e *evaluation) matches(attrs admission.Attributes, h mutating.PolicyHook) bool {
	ok, _, _, err := e.set.matcher.DefinitionMatches(attrs, e.o, mutating.NewMutatingAdmissionPolicyAccessor(h.Policy))
	if err != nil {
		return true
	}
	if !ok {
		return false
	}
	for _, b := range h.Bindings {
		ok, err := e.set.matcher.BindingMatches(attrs, e.o, mutating.NewMutatingAdmissionPolicyBindingAccessor(b))
		if err != nil || ok {
			return true
		}
	}
	return false
}

// matchAttributes describes the request for matching only: the stored object, unconverted.
func (e *evaluation) matchAttributes(op admission.Operation) admission.Attributes {
	var old runtime.Object
	if op == admission.Update {
		old = e.stored
	}
	return admission.NewAttributesRecord(e.stored, old, e.gvk, e.stored.GetNamespace(), e.stored.GetName(), e.gvr, "",
		op, operationOptions(op), false, &user.DefaultInfo{})
}

// attributes describes the request as the API server's admission sees it: a built-in object in its internal
// version (the dispatcher converts it to the version each policy matches), a custom resource as it is.
//
// On an UPDATE, oldObject is a deep copy of the admitted object rather than a second conversion of the stored
// one: the content is the same, and copying a typed object costs a fraction of converting it again.
func (e *evaluation) attributes(op admission.Operation) (admission.Attributes, error) {
	object, err := e.admitted()
	if err != nil {
		return nil, err
	}
	var old runtime.Object
	if op == admission.Update {
		old = object.DeepCopyObject()
	}
	return admission.NewAttributesRecord(object, old, e.gvk, e.stored.GetNamespace(), e.stored.GetName(), e.gvr, "",
		op, operationOptions(op), false, &user.DefaultInfo{}), nil
}

// admitted returns a copy of the stored object in the form admission holds it.
func (e *evaluation) admitted() (runtime.Object, error) {
	if !e.set.types.builtinKind(e.gvk) {
		return e.stored.DeepCopy(), nil
	}
	internal := schema.GroupVersion{Group: e.gvk.Group, Version: runtime.APIVersionInternal}
	obj, err := e.set.types.scheme.ConvertToVersion(e.stored.DeepCopy(), internal)
	if err != nil {
		return nil, fmt.Errorf("decoding %s %q: %w", e.gvk.Kind, e.stored.GetName(), err)
	}
	return obj, nil
}

// final returns the object as admission left it, in the stored object's version.
func (e *evaluation) final(attrs admission.Attributes) (map[string]any, error) {
	return e.unstructured(attrs.GetObject())
}

// unstructured returns obj in the stored object's version, as unstructured JSON.
func (e *evaluation) unstructured(obj runtime.Object) (map[string]any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind() == e.gvk {
		return u.Object, nil
	}
	versioned, err := e.set.types.scheme.ConvertToVersion(obj, e.gvk.GroupVersion())
	if err != nil {
		return nil, fmt.Errorf("encoding %s %q: %w", e.gvk.Kind, e.stored.GetName(), err)
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(versioned)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %q: %w", e.gvk.Kind, e.stored.GetName(), err)
	}
	content["apiVersion"], content["kind"] = e.gvk.GroupVersion().String(), e.gvk.Kind
	return content, nil
}

// dispatch runs the API server's dispatcher once and files its errors by policy into errs. It returns the
// API server's message when it would refuse the request: an error of a policy whose failurePolicy is Fail,
// or an error of the request as a whole.
func (e *evaluation) dispatch(ctx context.Context, attrs admission.Attributes, errs map[string][]string) string {
	err := e.set.dispatcher.Dispatch(ctx, attrs, e.o, e.set.hooks)
	if err == nil {
		return ""
	}
	var status *apierrors.StatusError
	if !errors.As(err, &status) || status.ErrStatus.Details == nil || len(status.ErrStatus.Details.Causes) == 0 {
		return err.Error()
	}
	denied := ""
	for _, cause := range status.ErrStatus.Details.Causes {
		policy := policyOf(cause.Message)
		if !slices.Contains(errs[policy], cause.Message) {
			errs[policy] = append(errs[policy], cause.Message)
		}
		if denied == "" && e.set.failurePolicy[policy] != admissionregistrationv1.Ignore {
			denied = cause.Message
		}
	}
	return denied
}

// policyOf returns the policy a PolicyError's message names (k8s.io/apiserver generic/policy_dispatcher.go:
// "policy '<name>' with binding '<binding>' denied request: ..." or "policy \"<name>\" denied request: ...").
func policyOf(message string) string {
	if rest, ok := strings.CutPrefix(message, "policy '"); ok {
		name, _, _ := strings.Cut(rest, "'")
		return name
	}
	if rest, ok := strings.CutPrefix(message, `policy "`); ok {
		name, _, _ := strings.Cut(rest, `"`)
		return name
	}
	return ""
}

// failAll makes every matched policy's result an error with message: the object cannot be judged.
func (e *evaluation) failAll(out Outcome, message string) Outcome {
	message = e.redaction(nil).String(message)
	for i := range out.Results {
		out.Results[i].Verdict, out.Results[i].Message = audit.Error, message
	}
	out.Denied = message
	return out
}

// outcome fills in the results from what the recorder saw and the errors the dispatcher reported.
func (e *evaluation) outcome(out Outcome, rec *recorder, final map[string]any, errs map[string][]string, denied string) Outcome {
	red := e.redaction(final)
	states := make([]map[string]any, len(rec.calls)+1)
	for i, call := range rec.calls {
		var err error
		if states[i], err = e.unstructured(call.before); err != nil {
			return e.failAll(out, err.Error())
		}
	}
	states[len(rec.calls)] = final
	changes := map[string][]Operation{}
	applied := map[string]bool{}
	for i, call := range rec.calls {
		applied[call.policy] = true
		if ops := Diff(states[i], states[i+1]); len(ops) > 0 {
			changes[call.policy] = append(changes[call.policy], red.Ops(ops)...)
		}
	}
	out.Denied = red.String(denied)
	if len(rec.calls) > 0 && denied == "" {
		if out.Patch = red.Ops(Diff(states[0], final)); len(out.Patch) > 0 {
			out.object = final
		}
	}
	kept := out.Results[:0]
	for _, r := range out.Results {
		switch {
		case len(errs[r.Policy]) > 0:
			r.Verdict = audit.Error
			r.Message = red.String(strings.Join(errs[r.Policy], "; "))
		case len(changes[r.Policy]) > 0:
			r.Verdict = audit.Warn
			r.FullPatch = changes[r.Policy]
			r.Fields = changedFields(r.FullPatch)
			r.Message = fmt.Sprintf("%s would change %s", r.Operation, strings.Join(r.Fields, ", "))
			var err error
			if r.Patch, r.PatchTruncated, err = BoundedPatch(r.FullPatch, MaxPatchBytes); err != nil {
				r.Verdict, r.Message = audit.Error, err.Error()
			}
		case applied[r.Policy]:
			r.Verdict = audit.Pass
			r.Message = "already as the policy makes it"
		default:
			// Its matchConditions exclude the object, or its params are not found under
			// parameterNotFoundAction Allow: the API server does not apply it.
			continue
		}
		kept = append(kept, r)
	}
	out.Results = kept
	return out
}

// redaction removes Secret values from what an evaluation reports.
type redaction struct {
	// secret says that the object is a Secret: the sensitive fields of its patches are replaced whole.
	secret    bool
	redactors []*audit.Redactor
}

// redaction returns the redaction of the evaluation: the object's values when it is a Secret, both stored
// and as the policies leave it (final, nil when unknown), and the values of the Secrets the bindings of
// policies with paramKind Secret read as params for it (a policy may copy them into the object).
func (e *evaluation) redaction(final map[string]any) redaction {
	r := redaction{secret: isSecret(e.gvk)}
	if r.secret {
		data, stringData := map[string]any{}, map[string]any{}
		for i, content := range []map[string]any{e.stored.Object, final} {
			for field, into := range map[string]map[string]any{secretData: data, secretStringData: stringData} {
				if m, ok := content[field].(map[string]any); ok {
					for k, v := range m {
						into[fmt.Sprintf("%d/%s", i, k)] = v
					}
				}
			}
		}
		secret := map[string]any{secretData: data, secretStringData: stringData}
		if md, ok := e.stored.Object["metadata"]; ok {
			secret["metadata"] = md
		}
		r.add(audit.NewSecretRedactor(secret))
	}
	for _, h := range e.set.hooks {
		pk := h.Policy.Spec.ParamKind
		if pk == nil || pk.APIVersion != "v1" || pk.Kind != "Secret" || h.ParamInformer == nil {
			continue
		}
		for _, b := range h.Bindings {
			params, err := generic.CollectParams(pk, h.ParamInformer, h.ParamScope,
				mutating.NewMutatingAdmissionPolicyBindingAccessor(b).GetParamRef(), e.stored.GetNamespace(), nil, nil)
			if err != nil {
				continue // the evaluation reports it; no value was read
			}
			for _, param := range params {
				if param == nil {
					continue
				}
				if content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(param); err == nil {
					r.add(audit.NewSecretRedactor(content))
				}
			}
		}
	}
	return r
}

func (r *redaction) add(red *audit.Redactor) {
	if red != nil {
		r.redactors = append(r.redactors, red)
	}
}

// String returns s without the values.
func (r redaction) String(s string) string {
	for _, red := range r.redactors {
		s = red.String(s)
	}
	return s
}

// Ops redacts the values of ops in place and returns them. In a Secret's patch, every value under data and
// stringData and the last-applied-configuration annotation is replaced by audit.RedactionMarker.
func (r redaction) Ops(ops []Operation) []Operation {
	if !r.secret && len(r.redactors) == 0 {
		return ops
	}
	for i, op := range ops {
		if op.Op != opRemove {
			ops[i].Value = r.at(op.Path, op.Value)
		}
	}
	return ops
}

// at redacts v, the value at the JSON pointer path of the object.
func (r redaction) at(path string, v any) any {
	if r.secret && sensitive(path) {
		return audit.RedactionMarker
	}
	switch x := v.(type) {
	case string:
		return r.String(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, w := range x {
			out[k] = r.at(path+"/"+escapePointer(k), w)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, w := range x {
			out[i] = r.at(fmt.Sprintf("%s/%d", path, i), w)
		}
		return out
	}
	return v
}

func isSecret(gvk schema.GroupVersionKind) bool {
	return gvk.Group == "" && gvk.Version == "v1" && gvk.Kind == "Secret"
}

// sensitive says whether the value at path in a Secret is secret: its data and stringData, and the
// annotation in which kubectl apply keeps them.
func sensitive(path string) bool {
	for _, prefix := range []string{"/data", "/stringData", "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration"} {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return false
}

// recorder collects, during one evaluation, the object each patcher is given, in call order: the change a
// call makes is the difference to what the next call is given (or to the final object), which includes the
// defaults the API server applies after each patch.
type recorder struct {
	calls []recordedCall
}

type recordedCall struct {
	policy string
	before runtime.Object
}

type recorderKey struct{}

// patching records that policy is about to patch obj. It keeps a copy: a custom resource is admitted as the
// very object the request holds, which the dispatcher overwrites with the patched one.
func (r *recorder) patching(policy string, obj runtime.Object) {
	r.calls = append(r.calls, recordedCall{policy: policy, before: obj.DeepCopyObject()})
}

// operationOptions are the options the API server's handlers pass to admission, as a request without query
// parameters sets them.
func operationOptions(op admission.Operation) runtime.Object {
	gv := metav1.SchemeGroupVersion
	if op == admission.Update {
		return &metav1.UpdateOptions{TypeMeta: metav1.TypeMeta{APIVersion: gv.String(), Kind: "UpdateOptions"}}
	}
	return &metav1.CreateOptions{TypeMeta: metav1.TypeMeta{APIVersion: gv.String(), Kind: "CreateOptions"}}
}

// exempt says whether the API server exempts gr from API-defined policies (k8s.io/apiserver generic/plugin.go:
// the admission configuration resources; k8s.io/kubernetes pkg/kubeapiserver/admission/exclusion: reviews,
// which are never stored).
func exempt(gr schema.GroupResource) bool {
	switch gr.Group {
	case admissionregistrationv1.GroupName:
		return strings.HasSuffix(gr.Resource, "admissionpolicies") || strings.HasSuffix(gr.Resource, "admissionpolicybindings")
	case "authentication.k8s.io", "authorization.k8s.io":
		return strings.HasSuffix(gr.Resource, "reviews")
	}
	return false
}

// RedactedSecret returns a copy of a Secret's content with every value that its patches redact (under data,
// stringData and the last-applied-configuration annotation) replaced by audit.RedactionMarker: the object that
// a Secret's redacted Outcome.Patch is shown against (kubectl celaudit whatif --diff), so that no value of it
// is shown. content must be unstructured JSON.
func RedactedSecret(content map[string]any) map[string]any {
	out := runtime.DeepCopyJSON(content)
	for _, field := range []string{secretData, secretStringData} {
		if m, ok := out[field].(map[string]any); ok {
			for k := range m {
				m[k] = audit.RedactionMarker
			}
		}
	}
	if md, ok := out["metadata"].(map[string]any); ok {
		if ann, ok := md["annotations"].(map[string]any); ok {
			if _, ok := ann[lastApplied]; ok {
				ann[lastApplied] = audit.RedactionMarker
			}
		}
	}
	return out
}

// The fields of a Secret that hold its values.
const (
	secretData       = "data"
	secretStringData = "stringData"
)

// lastApplied is the annotation in which kubectl apply keeps the object it applied, a Secret's values included.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"
