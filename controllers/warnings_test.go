package controllers

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/vap"
)

func testPolicy(name string, uid types.UID, generation int64) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, Generation: generation}}
}

func testBinding(name, policy string, uid types.UID, generation int64) admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, Generation: generation},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy},
	}
}

// TestWarningsOncePerGeneration records compile warnings as reconciles would: once per object generation and
// reason, again for a new generation or a new object of the same name.
func TestWarningsOncePerGeneration(t *testing.T) {
	events := &recordedEvents{}
	w := &warnings{Recorder: events}
	problems := []string{"spec.validations[0].expression: compilation error: x"}
	w.compileFailed(testPolicy("p", "u1", 1), kindVAP, problems)
	w.compileFailed(testPolicy("p", "u1", 1), kindVAP, problems) // another reconcile of generation 1
	w.compileFailed(testPolicy("p", "u1", 1), kindVAP, nil)      // nothing to say
	w.compileFailed(testPolicy("p", "u1", 2), kindVAP, problems) // edited, still broken
	w.compileFailed(testPolicy("p", "u2", 2), kindVAP, problems) // deleted and created again
	w.forget(kindVAP, "p")
	w.compileFailed(testPolicy("p", "u2", 2), kindVAP, problems) // forgotten: said again
	w.compileFailed(testPolicy("q", "u3", 1), kindVAP, []string{"a", "b"})
	note := "Not everything compiles, so the objects it covers get error results: spec.validations[0].expression: compilation error: x"
	want := []string{
		"Warning CompileFailed *v1.ValidatingAdmissionPolicy/p: " + note,
		"Warning CompileFailed *v1.ValidatingAdmissionPolicy/p: " + note,
		"Warning CompileFailed *v1.ValidatingAdmissionPolicy/p: " + note,
		"Warning CompileFailed *v1.ValidatingAdmissionPolicy/p: " + note,
		"Warning CompileFailed *v1.ValidatingAdmissionPolicy/q: Not everything compiles, so the objects it covers get error results: a; b",
	}
	if got := events.list(); !reflect.DeepEqual(got, want) {
		t.Errorf("Events:\n %q\nwant\n %q", got, want)
	}
}

// A long note is cut to the API server's limit, with a marker.
func TestWarningsBoundNotes(t *testing.T) {
	events := &recordedEvents{}
	w := &warnings{Recorder: events}
	w.compileFailed(testPolicy("p", "u1", 1), kindVAP, []string{strings.Repeat("é", 1000)})
	got := events.list()
	if len(got) != 1 {
		t.Fatalf("Events: %q", got)
	}
	_, note, _ := strings.Cut(got[0], ": ")
	// "é" takes 2 bytes: the cut falls on a character boundary, at 1023 or 1024 bytes.
	if len(note) < 1023 || len(note) > 1024 || !utf8.ValidString(note) || !strings.HasSuffix(note, "é ...[truncated]") {
		t.Errorf("note of %d bytes ending %q, want 1023 or 1024 bytes of UTF-8 ending with the truncation marker", len(note), note[len(note)-20:])
	}
}

// TestWarningsBindings checks the bindings of one policy: each problem once per binding generation, and the
// state of bindings that are gone is dropped.
func TestWarningsBindings(t *testing.T) {
	events := &recordedEvents{}
	w := &warnings{Recorder: events}
	b1, b2 := testBinding("b1", "gone", "u1", 1), testBinding("b2", "gone", "u2", 1)
	w.bindingsChecked("gone", []admissionregistrationv1.ValidatingAdmissionPolicyBinding{b1, b2}, missingPolicy("gone"))
	w.bindingsChecked("gone", []admissionregistrationv1.ValidatingAdmissionPolicyBinding{b1, b2}, missingPolicy("gone"))
	// Another policy's bindings are left alone.
	w.bindingsChecked("other", []admissionregistrationv1.ValidatingAdmissionPolicyBinding{testBinding("b3", "other", "u3", 1)}, missingPolicy("other"))
	// b2 is deleted: what was recorded of it goes, b1's stays.
	w.bindingsChecked("gone", []admissionregistrationv1.ValidatingAdmissionPolicyBinding{b1}, missingPolicy("gone"))
	if got, want := len(w.sent), 2; got != want {
		t.Errorf("state kept for %d objects, want %d (b1 and b3)", got, want)
	}
	// The policy is created: no more problems, nothing recorded.
	w.bindingsChecked("gone", []admissionregistrationv1.ValidatingAdmissionPolicyBinding{b1}, func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding) (string, string) {
		return "", ""
	})
	want := []string{
		"Warning PolicyNotFound *v1.ValidatingAdmissionPolicyBinding/b1: ValidatingAdmissionPolicy gone does not exist, so the binding audits nothing",
		"Warning PolicyNotFound *v1.ValidatingAdmissionPolicyBinding/b2: ValidatingAdmissionPolicy gone does not exist, so the binding audits nothing",
		"Warning PolicyNotFound *v1.ValidatingAdmissionPolicyBinding/b3: ValidatingAdmissionPolicy other does not exist, so the binding audits nothing",
	}
	if got := events.list(); !reflect.DeepEqual(got, want) {
		t.Errorf("Events:\n %q\nwant\n %q", got, want)
	}
}

// listedParams is a vap.ParamSource serving a fixed list of objects.
type listedParams []*unstructured.Unstructured

func (l listedParams) Get(schema.GroupVersionKind, string, string) (k8sruntime.Object, error) {
	panic("not used")
}

func (l listedParams) List(gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]k8sruntime.Object, error) {
	var out []k8sruntime.Object
	for _, o := range l {
		if o.GroupVersionKind() == gvk && (namespace == "" || o.GetNamespace() == namespace) && selector.Matches(labels.Set(o.GetLabels())) {
			out = append(out, o)
		}
	}
	return out, nil
}

func TestParamProblem(t *testing.T) {
	resolver, err := vap.NewStaticResolver([]*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"list", "watch"}}}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "limits", Kind: "Limits", Verbs: []string{"list", "watch"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	configMaps := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	limits := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Limits"}
	gadgets := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}
	param := func(gvk schema.GroupVersionKind, namespace, name string, lbls map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace(namespace)
		u.SetName(name)
		u.SetLabels(lbls)
		return u
	}
	params := listedParams{
		param(configMaps, "team-a", "limits", map[string]string{"tier": "gold"}),
		param(limits, "", "default", nil),
	}
	deny, allow := admissionregistrationv1.DenyAction, admissionregistrationv1.AllowAction
	byName := func(namespace, name string, action *admissionregistrationv1.ParameterNotFoundActionType) *admissionregistrationv1.ParamRef {
		return &admissionregistrationv1.ParamRef{Namespace: namespace, Name: name, ParameterNotFoundAction: action}
	}
	bySelector := func(namespace string, lbls map[string]string) *admissionregistrationv1.ParamRef {
		return &admissionregistrationv1.ParamRef{Namespace: namespace, Selector: &metav1.LabelSelector{MatchLabels: lbls}, ParameterNotFoundAction: &deny}
	}
	const errorResults = ", so every object it matches gets an error result (parameterNotFoundAction Deny)"
	cases := []struct {
		name       string
		paramKind  *schema.GroupVersionKind
		ref        *admissionregistrationv1.ParamRef
		wantReason string
		wantNote   string
	}{
		{name: "no paramKind", ref: byName("", "x", &deny)},
		{name: "no paramRef", paramKind: &configMaps},
		{name: "named, found in its namespace", paramKind: &configMaps, ref: byName("team-a", "limits", &deny)},
		{name: "named, found in some namespace", paramKind: &configMaps, ref: byName("", "limits", &deny)},
		{
			name: "named, in another namespace", paramKind: &configMaps, ref: byName("team-b", "limits", &deny),
			wantReason: ReasonParamsNotFound,
			wantNote:   "The binding's paramRef finds no param: no v1 ConfigMap named limits exists in namespace team-b" + errorResults,
		},
		{
			name: "named, nowhere", paramKind: &configMaps, ref: byName("", "missing", nil),
			wantReason: ReasonParamsNotFound,
			wantNote:   "The binding's paramRef finds no param: no v1 ConfigMap named missing exists in any namespace" + errorResults,
		},
		{name: "named, nowhere, with parameterNotFoundAction Allow", paramKind: &configMaps, ref: byName("", "missing", &allow)},
		{name: "cluster-scoped, found whatever the namespace says", paramKind: &limits, ref: byName("ignored", "default", &deny)},
		{
			name: "cluster-scoped, missing", paramKind: &limits, ref: byName("", "strict", &deny),
			wantReason: ReasonParamsNotFound,
			wantNote:   "The binding's paramRef finds no param: no example.com/v1 Limits named strict exists (cluster-scoped)" + errorResults,
		},
		{name: "selected", paramKind: &configMaps, ref: bySelector("", map[string]string{"tier": "gold"})},
		{
			name: "selects none", paramKind: &configMaps, ref: bySelector("team-a", map[string]string{"tier": "silver"}),
			wantReason: ReasonParamsNotFound,
			wantNote:   `The binding's paramRef finds no param: its selector "tier=silver" selects no v1 ConfigMap in namespace team-a` + errorResults,
		},
		{
			name: "paramKind not served, whatever parameterNotFoundAction says", paramKind: &gadgets, ref: byName("", "x", &allow),
			wantReason: ReasonParamsNotFound,
			wantNote:   "The policy's paramKind example.com/v1 Gadget is not served, so every object the binding matches gets an error result",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := testBinding("b", "p", "u", 1)
			b.Spec.ParamRef = tc.ref
			reason, note := paramProblem(&b, tc.paramKind, resolver, params)
			if reason != tc.wantReason || note != tc.wantNote {
				t.Errorf("paramProblem = %q, %q\nwant %q, %q", reason, note, tc.wantReason, tc.wantNote)
			}
		})
	}
}

// recordedEvents records Events as "type reason kind/name: note".
type recordedEvents struct {
	mu     sync.Mutex
	events []string
}

func (r *recordedEvents) Eventf(regarding, _ k8sruntime.Object, eventtype, reason, _, note string, args ...any) {
	m := regarding.(client.Object)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s %s %T/%s: %s", eventtype, reason, regarding, m.GetName(), fmt.Sprintf(note, args...)))
}

func (r *recordedEvents) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}
