package admit

import (
	"context"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// crdOption changes the fixture CRD.
type crdOption func(*apiextensionsv1.CustomResourceDefinition)

// newCRD returns a CRD of kind Widget in example.com with one served version v1 of the given schema (YAML).
func newCRD(t *testing.T, schemaYAML string, opts ...crdOption) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	props := &apiextensionsv1.JSONSchemaProps{}
	if err := yaml.UnmarshalStrict([]byte(schemaYAML), props); err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "widgets.example.com"
	crd.Spec = apiextensionsv1.CustomResourceDefinitionSpec{
		Group: "example.com",
		Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget", ListKind: "WidgetList", Plural: "widgets", Singular: "widget"},
		Scope: apiextensionsv1.NamespaceScoped,
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
			Name: "v1", Served: true, Storage: true,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: props},
		}},
	}
	for _, o := range opts {
		o(crd)
	}
	return crd
}

func withStatus(crd *apiextensionsv1.CustomResourceDefinition) {
	crd.Spec.Versions[0].Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
}

const widgetSchema = `
type: object
properties:
  spec:
    type: object
    properties:
      replicas: {type: integer, default: 1}
      size: {type: string, default: m}
      nested:
        type: object
        default: {}
        properties:
          cpu: {type: integer, default: 2}
  status:
    type: object
    properties:
      ready: {type: boolean}
`

func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestPrepare(t *testing.T) {
	for _, tc := range []struct {
		name string
		crds []*apiextensionsv1.CustomResourceDefinition
		obj  string
		want string // the prepared object, YAML
	}{{
		name: "custom resource pruned and defaulted, status kept without the subresource",
		crds: []*apiextensionsv1.CustomResourceDefinition{newCRD(t, widgetSchema)},
		obj:  "{apiVersion: example.com/v1, kind: Widget, metadata: {name: w}, spec: {size: null, colour: red}, status: {ready: false}}",
		want: "{apiVersion: example.com/v1, kind: Widget, metadata: {name: w, generation: 1}, spec: {replicas: 1, size: m, nested: {cpu: 2}}, status: {ready: false}}",
	}, {
		name: "status dropped with the status subresource",
		crds: []*apiextensionsv1.CustomResourceDefinition{newCRD(t, widgetSchema, withStatus)},
		obj:  "{apiVersion: example.com/v1, kind: Widget, metadata: {name: w}, spec: {replicas: 3}, status: {ready: false}}",
		want: "{apiVersion: example.com/v1, kind: Widget, metadata: {name: w, generation: 1}, spec: {replicas: 3, size: m, nested: {cpu: 2}}}",
	}, {
		name: "built-in object defaulted by the API server's functions",
		obj: `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns1},
		       spec: {containers: [{name: c, image: i}]}}`,
		want: `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns1},
		        spec: {containers: [{name: c, image: i, imagePullPolicy: Always, resources: {},
		                             terminationMessagePath: /dev/termination-log, terminationMessagePolicy: File}],
		               restartPolicy: Always, terminationGracePeriodSeconds: 30, dnsPolicy: ClusterFirst,
		               securityContext: {}, schedulerName: default-scheduler, enableServiceLinks: true},
		        status: {}}`,
	}, {
		name: "unknown kind returned as it is",
		obj:  "{apiVersion: other.example.com/v1, kind: Gadget, metadata: {name: g}, spec: {anything: [1]}}",
		want: "{apiVersion: other.example.com/v1, kind: Gadget, metadata: {name: g}, spec: {anything: [1]}}",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPreparer(tc.crds)
			if err != nil {
				t.Fatal(err)
			}
			in := object(t, tc.obj)
			before := in.DeepCopy()
			got, err := p.Prepare(in)
			if err != nil {
				t.Fatal(err)
			}
			gotYAML, _ := yaml.Marshal(got.Object)
			wantYAML, _ := yaml.Marshal(object(t, tc.want).Object)
			if string(gotYAML) != string(wantYAML) {
				t.Errorf("prepared:\n%s\nwant:\n%s", gotYAML, wantYAML)
			}
			if beforeYAML, _ := yaml.Marshal(before.Object); string(beforeYAML) != string(mustYAML(t, in)) {
				t.Errorf("Prepare modified its argument")
			}
			data, err := before.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			fromJSON, err := p.PrepareJSON(before.GroupVersionKind(), data)
			if err != nil {
				t.Fatal(err)
			}
			if jsonYAML := mustYAML(t, fromJSON); string(jsonYAML) != string(wantYAML) {
				t.Errorf("prepared from JSON:\n%s\nwant:\n%s", jsonYAML, wantYAML)
			}
		})
	}
}

func mustYAML(t *testing.T, u *unstructured.Unstructured) []byte {
	t.Helper()
	out, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPrepareDecodeError(t *testing.T) {
	p, err := NewPreparer(nil)
	if err != nil {
		t.Fatal(err)
	}
	obj := object(t, "{apiVersion: apps/v1, kind: Deployment, metadata: {name: d}, spec: {replicas: many}}")
	want := `decoding Deployment "d": json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32`
	if _, err = p.Prepare(obj); err == nil || err.Error() != want {
		t.Errorf("Prepare: error %v, want %s", err, want)
	}
	data, _ := obj.MarshalJSON()
	if _, err = p.PrepareJSON(obj.GroupVersionKind(), data); err == nil || err.Error() != want {
		t.Errorf("PrepareJSON: error %v, want %s", err, want)
	}
}

func TestValidateCRD(t *testing.T) {
	for _, tc := range []struct {
		name   string
		crd    *apiextensionsv1.CustomResourceDefinition
		reason string // "" when valid
	}{
		{name: "valid", crd: newCRD(t, widgetSchema)},
		{name: "field without type", crd: newCRD(t, "{type: object, properties: {spec: {properties: {a: {type: string}}}}}"),
			reason: "spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"},
		{name: "rule that does not compile", crd: newCRD(t, "{type: object, properties: {spec: {type: object, x-kubernetes-validations: [{rule: 'self.missing > 1'}]}}}"),
			reason: "undefined field 'missing'"},
		{name: "bad scope", crd: newCRD(t, widgetSchema, func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Scope = "Global" }),
			reason: `spec.scope: Unsupported value: "Global"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateCRD(context.Background(), tc.crd)
			switch {
			case tc.reason == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tc.reason != "" && (err == nil || !strings.Contains(err.Error(), tc.reason)):
				t.Errorf("error %v, want one with %q", err, tc.reason)
			}
		})
	}
}
