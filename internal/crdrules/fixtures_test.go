package crdrules

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// The CRD of the fixtures: widgets.example.com, kind Widget, namespaced.
const (
	testGroup  = "example.com"
	testCRD    = "widgets.example.com"
	testPlural = "widgets"
)

func gvr(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: testGroup, Version: version, Resource: testPlural}
}

// crdOption changes the fixture CRD.
type crdOption func(*apiextensionsv1.CustomResourceDefinition)

// newCRD returns the widgets CRD with one served version v1 whose openAPIV3Schema is rootYAML.
func newCRD(t testing.TB, rootYAML string, opts ...crdOption) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: testCRD, UID: "crd-uid", Generation: 1},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: testGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: testPlural, Singular: "widget", Kind: "Widget", ListKind: "WidgetList",
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: props(t, rootYAML)}},
			},
		},
	}
	for _, o := range opts {
		o(crd)
	}
	return crd
}

// withVersion adds a version whose openAPIV3Schema is rootYAML ("" for no schema).
func withVersion(t testing.TB, name string, served bool, rootYAML string) crdOption {
	return func(crd *apiextensionsv1.CustomResourceDefinition) {
		v := apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: served}
		if rootYAML != "" {
			v.Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: props(t, rootYAML)}
		}
		crd.Spec.Versions = append(crd.Spec.Versions, v)
	}
}

func withAnnotations(kv ...string) crdOption {
	return func(crd *apiextensionsv1.CustomResourceDefinition) {
		crd.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			crd.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func withScale(specPath, statusPath string) crdOption {
	return func(crd *apiextensionsv1.CustomResourceDefinition) {
		crd.Spec.Versions[0].Subresources = &apiextensionsv1.CustomResourceSubresources{
			Scale: &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: specPath, StatusReplicasPath: statusPath},
		}
	}
}

// props parses a schema written in YAML.
func props(t testing.TB, y string) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	p := &apiextensionsv1.JSONSchemaProps{}
	if err := yaml.Unmarshal([]byte(y), p); err != nil {
		t.Fatalf("parsing schema: %v\n%s", err, y)
	}
	return p
}

// specSchema is a root schema whose spec is specYAML (indented by the caller's own layout).
func specSchema(specYAML string) string {
	return "type: object\nproperties:\n  apiVersion: {type: string}\n  kind: {type: string}\n  metadata: {type: object}\n  spec:\n" + indent(specYAML, "    ")
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// widget returns a Widget of version v1 named x in namespace default, with bodyYAML (e.g. "spec: {a: 1}")
// as the rest of the object, decoded as the apiserver decodes it (integers as int64).
func widget(t testing.TB, bodyYAML string) *unstructured.Unstructured {
	t.Helper()
	return object(t, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x, namespace: default}\n"+bodyYAML)
}

// object decodes a whole object written in YAML with the unstructured JSON decoder.
func object(t testing.TB, y string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatalf("parsing object: %v\n%s", err, y)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatalf("decoding object: %v\n%s", err, j)
	}
	return u
}

// findings compiles crd and returns the findings of obj in version v1. It also checks that the validation
// left obj as it was: objects read from the API server are validated in place, not copied.
func findings(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition, obj *unstructured.Unstructured, opts ...Options) []Finding {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	var before *unstructured.Unstructured
	if obj != nil {
		before = obj.DeepCopy()
	}
	fs := Compile(crd, o).Findings(context.Background(), "v1", obj)
	if obj != nil && !reflect.DeepEqual(obj.Object, before.Object) {
		t.Errorf("validating the object modified it:\n got %#v\nwant %#v", obj.Object, before.Object)
	}
	return fs
}

// dump renders findings for failure messages.
func dump(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "\n  {RuleID: %q, Verdict: %q, Reason: %q, FieldPath: %q, FieldError: %v,\n   Message: %q}", f.RuleID, f.Verdict, f.Reason, f.FieldPath, f.FieldError, f.Message)
	}
	return b.String()
}

// withManagedFields gives obj the managed fields the API server records for a kubectl apply and a later
// update by a controller.
func withManagedFields(t testing.TB, obj *unstructured.Unstructured) {
	t.Helper()
	m := object(t, `apiVersion: v1
kind: List
metadata:
  managedFields:
  - apiVersion: example.com/v1
    fieldsType: FieldsV1
    fieldsV1:
      f:metadata:
        f:annotations:
          .: {}
          f:kubectl.kubernetes.io/last-applied-configuration: {}
      f:spec:
        .: {}
        f:maxReplicas: {}
        f:minReplicas: {}
        f:mode: {}
        f:ports: {}
        f:replicas: {}
    manager: kubectl-client-side-apply
    operation: Update
    time: "2026-11-20T10:00:00Z"
  - apiVersion: example.com/v1
    fieldsType: FieldsV1
    fieldsV1:
      f:status:
        .: {}
        f:conditions: {}
        f:observedGeneration: {}
    manager: widget-controller
    operation: Update
    subresource: status
    time: "2026-11-20T10:00:05Z"
`)
	if err := unstructured.SetNestedField(obj.Object, m.Object["metadata"].(map[string]interface{})["managedFields"], "metadata", "managedFields"); err != nil {
		t.Fatal(err)
	}
}
