package controllers

import (
	"fmt"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/crdrules"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/report"
	"github.com/celaudit/celaudit/internal/vap"
)

// Kinds of the objects Warning Events are recorded on, as their state is kept.
const (
	kindCRD         = "CustomResourceDefinition"
	kindVAP         = "ValidatingAdmissionPolicy"
	kindBinding     = "ValidatingAdmissionPolicyBinding"
	kindAuditPolicy = "AuditPolicy"
	kindMAP         = "MutatingAdmissionPolicy"
)

// maxNoteBytes is the API server's limit on an Event's note.
const maxNoteBytes = 1024

// compileProblems is what a compiled policy tells of the expressions or rules it could not compile.
type compileProblems interface {
	Problems() []string
}

var (
	_ compileProblems = &vap.Compiled{}
	_ compileProblems = &crdrules.Policy{}
	_ compileProblems = &mutate.Compiled{}
)

// warnings records Warning Events where users look (`kubectl describe` of a policy, a CRD or a binding) when
// what they wrote cannot be audited as written: the error results it also yields are easy to miss among a
// report's rows. Each reason is recorded once per object generation, however often the object is reconciled;
// a fixed object has a new generation. It keeps state only for objects that were warned about and still
// exist. The reconcilers of CRDs and policies share it.
type warnings struct {
	Recorder EventRecorder

	mu   sync.Mutex
	sent map[warnedObject]*warned
}

// warnedObject identifies an object that was warned about.
type warnedObject struct{ kind, name string }

// warned is what was recorded about one object in its current generation.
type warned struct {
	uid        types.UID
	generation int64
	policy     string // the policy a binding names; "" for other objects
	reasons    sets.Set[string]
}

// warn records a Warning Event with reason on obj unless it was recorded for obj's uid and generation
// already. policy is the policy a binding names, "" for other kinds.
func (w *warnings) warn(obj client.Object, kind, policy, reason, action, note string) {
	key := warnedObject{kind: kind, name: obj.GetName()}
	w.mu.Lock()
	if w.sent == nil {
		w.sent = map[warnedObject]*warned{}
	}
	st := w.sent[key]
	if st == nil || st.uid != obj.GetUID() || st.generation != obj.GetGeneration() {
		st = &warned{uid: obj.GetUID(), generation: obj.GetGeneration(), reasons: sets.New[string]()}
		w.sent[key] = st
	}
	st.policy = policy
	done := st.reasons.Has(reason)
	st.reasons.Insert(reason)
	w.mu.Unlock()
	if !done {
		w.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, action, "%s", report.TruncateMessage(note, maxNoteBytes))
	}
}

// forget drops what was recorded about the object kind/name: it is gone.
func (w *warnings) forget(kind, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.sent, warnedObject{kind: kind, name: name})
}

// compileFailed records a CompileFailed Warning Event on obj, a policy or a CRD, unless problems is empty.
func (w *warnings) compileFailed(obj client.Object, kind string, problems []string) {
	if len(problems) == 0 {
		return
	}
	w.warn(obj, kind, "", ReasonCompileFailed, "Compile",
		"Not everything compiles, so the objects it covers get error results: "+strings.Join(problems, "; "))
}

// bindingsChecked records the Warning Events of the bindings of policy, all of those that exist: problem says
// what is wrong with one, if anything, as an Event reason and note. It forgets the bindings of policy that are
// gone.
func (w *warnings) bindingsChecked(policy string, bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding,
	problem func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding) (reason, note string),
) {
	exist := sets.New[string]()
	for i := range bindings {
		b := &bindings[i]
		exist.Insert(b.Name)
		if reason, note := problem(b); reason != "" {
			w.warn(b, kindBinding, policy, reason, "Bind", note)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, st := range w.sent {
		if key.kind == kindBinding && st.policy == policy && !exist.Has(key.name) {
			delete(w.sent, key)
		}
	}
}

// missingPolicy is the problem of every binding of a policy that does not exist.
func missingPolicy(policy string) func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding) (string, string) {
	return func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding) (string, string) {
		return ReasonPolicyNotFound, fmt.Sprintf("ValidatingAdmissionPolicy %s does not exist, so the binding audits nothing", policy)
	}
}

// paramProblem says why binding b of a policy with paramKind finds no params, as the results of the objects
// it matches will: the paramKind is not served, or the paramRef names or selects no object (only when
// parameterNotFoundAction is Deny: with Allow, the API server admits those objects without evaluating the
// policy, and so does the audit). It returns "" when b reads no params or finds some. resolver and params are
// those the policy was bound with; params holds what the binding's paramRef reads.
func paramProblem(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, paramKind *schema.GroupVersionKind,
	resolver vap.ResourceResolver, params vap.ParamSource,
) (reason, note string) {
	ref := b.Spec.ParamRef
	if paramKind == nil || ref == nil {
		return "", ""
	}
	kind := paramKind.GroupVersion().String() + " " + paramKind.Kind
	res, err := resolver.ResourceForKind(*paramKind)
	if err != nil {
		return ReasonParamsNotFound, fmt.Sprintf("The policy's paramKind %s is not served, so every object the binding matches gets an error result", kind)
	}
	if failer, ok := params.(vap.ParamFailer); ok {
		if err := failer.ParamsFailing(*paramKind, ref.Namespace); err != nil {
			return ReasonParamsNotRead, fmt.Sprintf("Params cannot be read: %v. Every object the binding matches gets an error result until they can", err)
		}
	}
	if ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionregistrationv1.AllowAction {
		return "", ""
	}
	namespace, where := "", "in any namespace"
	switch {
	case !res.Namespaced:
		where = "(cluster-scoped)"
	case ref.Namespace != "":
		namespace, where = ref.Namespace, "in namespace "+ref.Namespace
	}
	selector := labels.Everything()
	what := fmt.Sprintf("no %s named %s exists %s", kind, ref.Name, where)
	if ref.Name == "" {
		if ref.Selector == nil {
			return "", ""
		}
		s, err := metav1.LabelSelectorAsSelector(ref.Selector)
		if err != nil {
			return "", "" // the binding fails to configure, which its error results tell
		}
		selector, what = s, fmt.Sprintf("its selector %q selects no %s %s", s.String(), kind, where)
	}
	objs, err := params.List(*paramKind, namespace, selector)
	if err != nil {
		return "", "" // not known: the error results tell
	}
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil && (ref.Name == "" || m.GetName() == ref.Name) {
			return "", ""
		}
	}
	return ReasonParamsNotFound, fmt.Sprintf("The binding's paramRef finds no param: %s, so every object it matches gets an error result (parameterNotFoundAction Deny)", what)
}
