package crdrules_test

import (
	"context"
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/internal/crdrules"
)

// Example audits two stored widgets against the validation of their CRD.
func Example() {
	raw, err := os.ReadFile("testdata/widgets-crd.yaml")
	if err != nil {
		panic(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		panic(err)
	}
	policy := crdrules.Compile(crd, crdrules.Options{})
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

	for _, doc := range []string{
		`{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "good", "namespace": "default"},
		  "spec": {"minReplicas": 1, "replicas": 2, "maxReplicas": 3, "mode": "fast"}}`,
		`{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "bad", "namespace": "default"},
		  "spec": {"minReplicas": 1, "replicas": 5, "maxReplicas": 3, "owner": "root", "mode": "fast",
		           "ports": [{"name": "http", "port": 80}]}}`,
	} {
		// The apiserver's decoder: integers become int64, as CEL rules expect.
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON([]byte(doc)); err != nil {
			panic(err)
		}
		for _, r := range policy.Evaluate(context.Background(), gvr, obj) {
			fmt.Printf("%s %s [%s] %s: %s\n", obj.GetName(), r.Verdict, r.Severity, r.Rule, r.Message)
		}
	}
	// Output:
	// good skip [high] spec.x-kubernetes-validations[2] (version v1): transition rule (uses oldSelf) is only evaluated on update; a stored object has no previous version
	// good pass [high] validation (version v1): object satisfies the validation of widgets.example.com v1
	// bad fail [high] spec.x-kubernetes-validations[0] (version v1): spec: Invalid value: replicas (5) must be between 1 and 3
	// bad skip [high] spec.x-kubernetes-validations[2] (version v1): transition rule (uses oldSelf) is only evaluated on update; a stored object has no previous version
	// bad fail [high] spec.x-kubernetes-validations[1] (version v1): spec.owner: Forbidden: root may not own a widget
	// bad fail [high] spec.ports[*].x-kubernetes-validations[0] (at spec.ports[0], version v1): spec.ports[0]: Invalid value: low ports are for system ports only
}
