package mutate

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"

	"github.com/celaudit/celaudit/internal/admit"
	"github.com/celaudit/celaudit/internal/audit"
)

// policy returns a MutatingAdmissionPolicy named name on resources (core group unless "group/resource"), for
// operations, with the given mutations and extra spec fields (YAML lines indented by two spaces).
func policy(name, resource, operations, extra string, mutations ...string) string {
	group := ""
	if g, r, ok := strings.Cut(resource, "/"); ok {
		group, resource = g, r
	}
	return fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: %s}
spec:
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - {apiGroups: [%q], apiVersions: [v1], operations: [%s], resources: [%s]}
%s
  mutations:
%s`, name, group, operations, resource, extra, strings.Join(mutations, "\n"))
}

func jsonPatch(expr string) string {
	return "  - patchType: JSONPatch\n    jsonPatch:\n      expression: '" + expr + "'"
}

func applyConfig(expr string) string {
	return "  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: '" + expr + "'"
}

func binding(policy string) string {
	return fmt.Sprintf("apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicyBinding\nmetadata: {name: %s}\nspec: {policyName: %s}\n", policy, policy)
}

const bareConfigMap = `
apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: default, uid: "1", resourceVersion: "7"}
data: {k: v}
`

const teamLabel = `Object{metadata: Object.metadata{labels: {"team": "blue"}}}`

// want describes an expected outcome, written by hand.
type want struct {
	operation admission.Operation
	// verdicts are "policy=verdict", in evaluation order.
	verdicts []string
	patch    string // Outcome.Patch as JSON; "" for none
	denied   string // a prefix of Outcome.Denied; "" for none
	message  string // a prefix of the first result's message; "" to not check
}

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  string
		docs []string
		want want
	}{
		{
			name: "update drift",
			obj:  bareConfigMap,
			docs: []string{policy("p", "configmaps", "CREATE, UPDATE", "", applyConfig(teamLabel)), binding("p")},
			want: want{operation: admission.Update, verdicts: []string{"p=warn"},
				patch: `[{"op":"add","path":"/metadata/labels","value":{"team":"blue"}}]`, message: "UPDATE would change metadata.labels.team"},
		},
		{
			name: "already in shape",
			obj:  strings.Replace(bareConfigMap, `uid: "1"`, `uid: "1", labels: {team: blue}`, 1),
			docs: []string{policy("p", "configmaps", "CREATE, UPDATE", "", applyConfig(teamLabel)), binding("p")},
			want: want{operation: admission.Update, verdicts: []string{"p=pass"}},
		},
		{
			name: "create only",
			obj:  bareConfigMap,
			docs: []string{policy("p", "configmaps", "CREATE", "", applyConfig(teamLabel)), binding("p")},
			want: want{operation: admission.Create, verdicts: []string{"p=warn"},
				patch: `[{"op":"add","path":"/metadata/labels","value":{"team":"blue"}}]`, message: "CREATE would change metadata.labels.team"},
		},
		{
			name: "update wins over create",
			obj:  bareConfigMap,
			docs: []string{
				policy("a-create", "configmaps", "CREATE", "", jsonPatch(`[JSONPatch{op: "add", path: "/data/c", value: "1"}]`)), binding("a-create"),
				policy("b-update", "configmaps", "UPDATE", "", jsonPatch(`[JSONPatch{op: "add", path: "/data/u", value: "1"}]`)), binding("b-update"),
			},
			want: want{operation: admission.Update, verdicts: []string{"b-update=warn"}, patch: `[{"op":"add","path":"/data/u","value":"1"}]`},
		},
		{
			name: "unbound policy is not applied",
			obj:  bareConfigMap,
			docs: []string{policy("p", "configmaps", "CREATE, UPDATE", "", applyConfig(teamLabel))},
			want: want{},
		},
		{
			name: "other resource",
			obj:  bareConfigMap,
			docs: []string{policy("p", "secrets", "CREATE, UPDATE", "", applyConfig(teamLabel)), binding("p")},
			want: want{},
		},
		{
			name: "excluded by matchConditions",
			obj:  bareConfigMap,
			docs: []string{policy("p", "configmaps", "CREATE, UPDATE",
				"  matchConditions:\n  - {name: never, expression: 'object.metadata.name == \"b\"'}", applyConfig(teamLabel)), binding("p")},
			want: want{operation: admission.Update},
		},
		{
			name: "expression does not compile",
			obj:  bareConfigMap,
			docs: []string{policy("p", "configmaps", "CREATE, UPDATE", "", jsonPatch(`[JSONPatch{op: "add", path: undefinedVariable}]`)), binding("p")},
			want: want{operation: admission.Update, verdicts: []string{"p=error"},
				denied: "policy 'p' with binding 'p' denied request: compilation failed", message: "policy 'p' with binding 'p' denied request: compilation failed"},
		},
		{
			name: "failure ignored, other policy applied",
			obj:  bareConfigMap,
			docs: []string{
				policy("a-fails", "configmaps", "UPDATE", "  failurePolicy: Ignore", jsonPatch(`[JSONPatch{op: "remove", path: "/data/absent"}]`)), binding("a-fails"),
				policy("b-adds", "configmaps", "UPDATE", "", jsonPatch(`[JSONPatch{op: "add", path: "/data/u", value: "1"}]`)), binding("b-adds"),
			},
			want: want{operation: admission.Update, verdicts: []string{"a-fails=error", "b-adds=warn"},
				patch: `[{"op":"add","path":"/data/u","value":"1"}]`, message: "policy 'a-fails' with binding 'a-fails' denied request: JSON Patch: error in remove"},
		},
		{
			name: "defaults applied after the patch",
			obj: defaulted(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: default}
spec:
  selector: {matchLabels: {app: d}}
  template:
    metadata: {labels: {app: d}}
    spec:
      containers: [{name: app, image: "nginx:1.25"}]
`),
			docs: []string{policy("p", "apps/deployments", "UPDATE", "",
				jsonPatch(`[JSONPatch{op: "add", path: "/spec/template/spec/containers/-", value: Object.spec.template.spec.containers{name: "log", image: "busybox:1.36"}}]`)), binding("p")},
			want: want{operation: admission.Update, verdicts: []string{"p=warn"},
				patch: `[{"op":"add","path":"/spec/template/spec/containers/1","value":{"image":"busybox:1.36","imagePullPolicy":"IfNotPresent","name":"log","resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"}}]`},
		},
		{
			// A built-in object is admitted once in its internal version and copied for oldObject: a policy
			// reading oldObject after another changed the object still sees the stored object.
			name: "update sees the stored object as oldObject",
			obj: defaulted(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: d}}
  template:
    metadata: {labels: {app: d}}
    spec:
      containers: [{name: app, image: "nginx:1.25"}]
`),
			docs: []string{
				policy("a-image", "apps/deployments", "UPDATE", "",
					jsonPatch(`[JSONPatch{op: "replace", path: "/spec/template/spec/containers/0/image", value: "nginx:1.26"}, JSONPatch{op: "replace", path: "/spec/replicas", value: 3}]`)),
				binding("a-image"),
				policy("b-old", "apps/deployments", "UPDATE", "",
					jsonPatch(`[JSONPatch{op: "add", path: "/metadata/annotations", value: {"old-image": string(oldObject.spec.template.spec.containers[0].image), "old-replicas": string(oldObject.spec.replicas)}}]`)),
				binding("b-old"),
			},
			want: want{operation: admission.Update, verdicts: []string{"a-image=warn", "b-old=warn"},
				patch: `[{"op":"add","path":"/metadata/annotations","value":{"old-image":"nginx:1.25","old-replicas":"2"}},` +
					`{"op":"replace","path":"/spec/replicas","value":3},` +
					`{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"nginx:1.26"}]`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := object(t, tc.obj)
			stored := obj.DeepCopy()
			gvr := configMapsGVR
			if obj.GetKind() == "Deployment" {
				gvr = deploymentsGVR
			}
			out := evaluate(t, gvr, obj, tc.docs...)
			if out.Operation != tc.want.operation {
				t.Errorf("operation %q, want %q", out.Operation, tc.want.operation)
			}
			var verdicts []string
			for _, r := range out.Results {
				verdicts = append(verdicts, r.Policy+"="+string(r.Verdict))
			}
			if !slices.Equal(verdicts, tc.want.verdicts) {
				t.Errorf("verdicts %v, want %v", verdicts, tc.want.verdicts)
			}
			patch := ""
			if len(out.Patch) > 0 {
				data, _ := json.Marshal(out.Patch)
				patch = string(data)
			}
			if patch != tc.want.patch {
				t.Errorf("patch\n got %s\nwant %s", patch, tc.want.patch)
			}
			if !strings.HasPrefix(out.Denied, tc.want.denied) || (tc.want.denied == "") != (out.Denied == "") {
				t.Errorf("denied %q, want prefix %q", out.Denied, tc.want.denied)
			}
			if tc.want.message != "" && (len(out.Results) == 0 || !strings.HasPrefix(out.Results[0].Message, tc.want.message)) {
				t.Errorf("results %+v, want a first message starting %q", out.Results, tc.want.message)
			}
			if !equalJSON(obj.Object, stored.Object) {
				t.Errorf("Evaluate modified the object")
			}
		})
	}
}

// defaulted returns doc as the API server stores it: defaulted.
func defaulted(t *testing.T, doc string) string {
	t.Helper()
	p, err := admit.NewPreparer(nil)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := p.Prepare(object(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestSecretValuesNeverReported copies a Secret's value into another key and a label: no result, message or
// patch may carry it, in any form.
func TestSecretValuesNeverReported(t *testing.T) {
	const value = "hunter2-correct-horse"
	encoded := base64.StdEncoding.EncodeToString([]byte(value))
	secret := object(t, fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: default}
type: Opaque
data: {password: %s}
`, encoded))
	out := evaluate(t, secretsGVR, secret,
		policy("copy", "secrets", "UPDATE", "",
			jsonPatch(`[JSONPatch{op: "add", path: "/data/copy", value: object.data.password}]`),
			jsonPatch(`[JSONPatch{op: "add", path: "/metadata/annotations", value: {"leak": string(object.data.password)}}]`)),
		binding("copy"),
		policy("fails", "secrets", "UPDATE", "  failurePolicy: Ignore",
			jsonPatch(`[JSONPatch{op: "remove", path: "/data/absent-" + string(object.data.password)}]`)),
		binding("fails"),
		policy("label", "secrets", "UPDATE", "", applyConfig(teamLabel)), binding("label"))
	data, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, form := range []string{value, encoded} {
		if strings.Contains(string(data), form) {
			t.Errorf("the outcome carries the Secret's value %q: %s", form, data)
		}
	}
	// What does not come from the Secret is still reported.
	if len(out.Results) != 3 || out.Results[0].Verdict != audit.Warn || out.Results[1].Verdict != audit.Error || out.Results[2].Verdict != audit.Warn {
		t.Fatalf("results %+v, want a warn for copy, an error for fails and a warn for label", out.Results)
	}
	if got, want := out.Results[0].Patch, `[{"op":"add","path":"/data/copy","value":"[redacted]"},{"op":"add","path":"/metadata/annotations","value":{"leak":"[redacted]"}}]`; got != want {
		t.Errorf("copy patch\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(out.Results[1].Message, "absent-"+audit.RedactionMarker) {
		t.Errorf("the error message %q does not show where the value was redacted", out.Results[1].Message)
	}
	if got := out.Results[2].Patch; got != `[{"op":"add","path":"/metadata/labels","value":{"team":"blue"}}]` {
		t.Errorf("label patch %s", got)
	}
}

// TestEvaluateConcurrently evaluates objects from several goroutines with one Set, as the scanner's workers
// do, and expects each outcome to be the one a lone evaluation gives.
func TestEvaluateConcurrently(t *testing.T) {
	set := newSet(t,
		policy("a-derive", "configmaps", "UPDATE", "", applyConfig(`has(object.metadata.labels) && "tier" in object.metadata.labels ? Object{metadata: Object.metadata{annotations: {"derived": object.metadata.labels["tier"]}}} : Object{}`)),
		binding("a-derive"),
		policy("b-tier", "configmaps", "UPDATE", "", applyConfig(`Object{metadata: Object.metadata{labels: {"tier": object.metadata.name}}}`)),
		binding("b-tier"))
	// b-tier sets the label after a-derive ran; a-derive is not reinvoked (reinvocationPolicy: Never), so
	// only the label changes.
	const workers, perWorker = 4, 25
	objects := make([][]*unstructured.Unstructured, workers)
	for w := range workers {
		for i := range perWorker {
			name := fmt.Sprintf("cm-%d-%d", w, i)
			objects[w] = append(objects[w], object(t, strings.Replace(bareConfigMap, "name: a,", "name: "+name+",", 1)))
		}
	}
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for _, obj := range objects[w] {
				name := obj.GetName()
				out := set.Evaluate(t.Context(), configMapsGVR, obj)
				data, _ := json.Marshal(out.Patch)
				if want := `[{"op":"add","path":"/metadata/labels","value":{"tier":"` + name + `"}}]`; string(data) != want {
					errs <- fmt.Errorf("%s: patch %s, want %s", name, data, want)
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestSecretParamValuesNeverReported copies a value of a Secret read as a param into a ConfigMap: neither the
// patch nor the message may carry it.
func TestSecretParamValuesNeverReported(t *testing.T) {
	out := evaluate(t, configMapsGVR, object(t, bareConfigMap),
		policy("copy", "configmaps", "UPDATE", "  paramKind: {apiVersion: v1, kind: Secret}",
			applyConfig(`Object{metadata: Object.metadata{annotations: {"token": string(params.data.token)}}}`)),
		`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: copy}
spec: {policyName: copy, paramRef: {name: token, namespace: default, parameterNotFoundAction: Deny}}
`)
	data, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), paramSecretValue) {
		t.Errorf("the outcome carries the param's value: %s", data)
	}
	if len(out.Results) != 1 || out.Results[0].Patch != `[{"op":"add","path":"/metadata/annotations","value":{"token":"[redacted]"}}]` {
		t.Errorf("results %+v, want one warn with the value redacted", out.Results)
	}
}

// panickingParams panics on every read, as a buggy cache might.
type panickingParams struct{}

func (panickingParams) Get(schema.GroupVersionKind, string, string) (runtime.Object, error) {
	panic("boom")
}

func (panickingParams) List(schema.GroupVersionKind, string, labels.Selector) ([]runtime.Object, error) {
	panic("boom")
}

// TestPanicIsAnErrorResult: a panic while evaluating fails the object's results, it does not stop the caller.
func TestPanicIsAnErrorResult(t *testing.T) {
	deps := testDeps(t)
	deps.Params = panickingParams{}
	p := fromYAML[admissionregistrationv1.MutatingAdmissionPolicy](t, policy("p", "configmaps", "UPDATE",
		"  paramKind: {apiVersion: v1, kind: ConfigMap}", applyConfig(teamLabel)))
	b := fromYAML[admissionregistrationv1.MutatingAdmissionPolicyBinding](t, `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: p}
spec: {policyName: p, paramRef: {name: team, namespace: default, parameterNotFoundAction: Deny}}
`)
	set := NewSet([]*Compiled{Compile(p)}, []*admissionregistrationv1.MutatingAdmissionPolicyBinding{b}, NewTypes(nil), deps)
	out := set.Evaluate(t.Context(), configMapsGVR, object(t, bareConfigMap))
	if len(out.Results) != 1 || out.Results[0].Verdict != audit.Error || !strings.Contains(out.Results[0].Message, "boom") {
		t.Errorf("results %+v, want one error naming the panic", out.Results)
	}
}

// TestOutcomeObject checks the object Outcome.Object returns: the object as the policies leave it, a copy
// each time, with a Secret's values as they are (the patch redacts them); none when the policies leave the
// object as it is or the request is refused. Expectations are written by hand.
func TestOutcomeObject(t *testing.T) {
	const token = "cm90YXRlZC10b2tlbi12YWx1ZQ==" // "rotated-token-value"
	for _, tc := range []struct {
		name string
		gvr  schema.GroupVersionResource
		obj  string
		docs []string
		want map[string]any // at the paths given (dot-separated); nil: Object returns nil
	}{{
		name: "a label added",
		gvr:  configMapsGVR, obj: bareConfigMap,
		docs: []string{policy("label", "configmaps", "UPDATE", "", applyConfig(teamLabel)), binding("label")},
		want: map[string]any{"metadata.labels.team": "blue", "data.k": "v", "metadata.name": "a"},
	}, {
		name: "already in shape",
		gvr:  configMapsGVR, obj: `{apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: default, labels: {team: blue}}}`,
		docs: []string{policy("label", "configmaps", "UPDATE", "", applyConfig(teamLabel)), binding("label")},
	}, {
		name: "refused: a failing policy under failurePolicy Fail",
		gvr:  configMapsGVR, obj: bareConfigMap,
		docs: []string{
			policy("label", "configmaps", "UPDATE", "", applyConfig(teamLabel)), binding("label"),
			policy("remove", "configmaps", "UPDATE", "  failurePolicy: Fail", jsonPatch(`[JSONPatch{op: "remove", path: "/data/absent"}]`)), binding("remove"),
		},
	}, {
		name: "a Secret's value set: there, unredacted",
		gvr:  secretsGVR, obj: `{apiVersion: v1, kind: Secret, metadata: {name: s, namespace: default}, type: Opaque, data: {old: b2xkLXZhbHVlLWhlcmU=}}`,
		docs: []string{policy("token", "secrets", "UPDATE", "", applyConfig(`Object{data: {"token": "`+token+`"}}`)), binding("token")},
		want: map[string]any{"data.token": token, "data.old": "b2xkLXZhbHVlLWhlcmU="},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			obj := object(t, tc.obj)
			out := evaluate(t, tc.gvr, obj, tc.docs...)
			got := out.Object()
			if tc.want == nil {
				if got != nil {
					t.Fatalf("Object() = %v, want nil (denied %q)", got.Object, out.Denied)
				}
				return
			}
			if got == nil {
				t.Fatalf("Object() = nil; outcome %+v", out)
			}
			for path, want := range tc.want {
				v, found, err := unstructured.NestedFieldNoCopy(got.Object, strings.Split(path, ".")...)
				if err != nil || !found || v != want {
					t.Errorf("%s = %v (found %t, %v), want %v", path, v, found, err, want)
				}
			}
			// A copy: changing it changes neither the next one nor the object evaluated.
			got.SetName("changed")
			if again := out.Object(); again.GetName() == "changed" {
				t.Error("Object() returns the same object twice")
			}
			if obj.GetName() == "changed" {
				t.Error("Object() returns the object evaluated")
			}
			if patch, _ := json.Marshal(out.Patch); strings.Contains(string(patch), token) {
				t.Errorf("the patch carries the Secret's value: %s", patch)
			}
		})
	}
}
