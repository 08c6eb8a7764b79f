package mutate

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/internal/vap"
)

var (
	configMapsGVR  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secretsGVR     = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	listVerbs      = metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
)

// testDiscovery is the test cluster's discovery output.
func testDiscovery() []*metav1.APIResourceList {
	return []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: listVerbs},
			{Name: "secrets", Kind: "Secret", Namespaced: true, Verbs: listVerbs},
			{Name: "namespaces", Kind: "Namespace", Verbs: listVerbs},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: listVerbs},
		}},
	}
}

type namespaces map[string]*corev1.Namespace

func (n namespaces) Get(name string) (*corev1.Namespace, error) {
	if ns, ok := n[name]; ok {
		return ns, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
}

// paramSecretValue is the value of the Secret served as a param.
const paramSecretValue = "s3cr3t-token-value"

// params is a ParamSource over typed objects, whatever their kind.
type params []runtime.Object

func (p params) Get(_ schema.GroupVersionKind, namespace, name string) (runtime.Object, error) {
	for _, o := range p {
		m, _ := meta.Accessor(o)
		if m.GetNamespace() == namespace && m.GetName() == name {
			return o, nil
		}
	}
	return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
}

func (p params) List(_ schema.GroupVersionKind, namespace string, selector labels.Selector) ([]runtime.Object, error) {
	var out []runtime.Object
	for _, o := range p {
		m, _ := meta.Accessor(o)
		if (namespace == "" || m.GetNamespace() == namespace) && selector.Matches(labels.Set(m.GetLabels())) {
			out = append(out, o)
		}
	}
	return out, nil
}

func testDeps(t testing.TB) vap.Deps {
	t.Helper()
	r, err := vap.NewStaticResolver(testDiscovery())
	if err != nil {
		t.Fatal(err)
	}
	return vap.Deps{
		Namespaces: namespaces{
			"default": {ObjectMeta: metav1.ObjectMeta{Name: "default"}},
			"prod":    {ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"env": "prod"}}},
		},
		Params: params{
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "team"}, Data: map[string]string{"team": "blue"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "token"}, Data: map[string][]byte{"token": []byte(paramSecretValue)}},
		},
		Resolver: r,
	}
}

// fromYAML decodes doc into a new T, failing the test on error.
func fromYAML[T any](t testing.TB, doc string) *T {
	t.Helper()
	out := new(T)
	if err := yaml.UnmarshalStrict([]byte(doc), out); err != nil {
		t.Fatalf("decoding %s: %v", doc, err)
	}
	return out
}

func object(t testing.TB, doc string) *unstructured.Unstructured {
	t.Helper()
	content := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &content); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: content}
}

// evaluate evaluates obj, read at gvr, against the policies and bindings given as YAML documents.
func evaluate(t testing.TB, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, docs ...string) Outcome {
	t.Helper()
	set := newSet(t, docs...)
	return set.Evaluate(context.Background(), gvr, obj)
}

func newSet(t testing.TB, docs ...string) *Set {
	t.Helper()
	var compiled []*Compiled
	var bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	for _, doc := range docs {
		kind := struct{ Kind string }{}
		_ = yaml.Unmarshal([]byte(doc), &kind)
		switch kind.Kind {
		case "MutatingAdmissionPolicy":
			compiled = append(compiled, Compile(fromYAML[admissionregistrationv1.MutatingAdmissionPolicy](t, doc)))
		case "MutatingAdmissionPolicyBinding":
			bindings = append(bindings, fromYAML[admissionregistrationv1.MutatingAdmissionPolicyBinding](t, doc))
		default:
			t.Fatalf("unexpected kind %q", kind.Kind)
		}
	}
	return NewSet(compiled, bindings, NewTypes(nil), testDeps(t))
}
