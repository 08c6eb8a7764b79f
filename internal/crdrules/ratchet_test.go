package crdrules

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestUpdateErrors checks which failures of a stored object an UPDATE still meets, with the apiserver's
// validation ratcheting: none on a field the update leaves unchanged, all on a field it changes, and
// transition rules always.
func TestUpdateErrors(t *testing.T) {
	crd := newCRD(t, specSchema(`type: object
properties:
  owner: {type: string, maxLength: 4}
  replicas:
    type: integer
    x-kubernetes-validations:
    - rule: self % 2 == 0
      message: replicas must be even
    - rule: self > oldSelf
      message: replicas must grow
  size:
    type: string
    x-kubernetes-validations:
    - rule: self in ['s', 'm']
      message: size must be s or m
`))
	// A schema error stops the rules, as on a create.
	const notChecked = "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
	// A stored object, as the update's old and new object: the apiserver requires a resourceVersion.
	stored := func(spec string) *unstructured.Unstructured {
		return object(t, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x, namespace: default, resourceVersion: '7'}\nspec: "+spec)
	}
	for _, tc := range []struct {
		name     string
		old, new string
		want     []string
	}{
		{name: "no-op update of an invalid owner: ratcheted", old: "{owner: too-long}", new: "{owner: too-long}"},
		{name: "invalid owner changed: rejected", old: "{owner: too-long}", new: "{owner: still-too-long}", want: []string{`spec.owner: Too long: may not be more than 4 bytes`, notChecked}},
		{name: "no-op update of an invalid size: ratcheted", old: "{size: xl}", new: "{size: xl}"},
		{name: "invalid size changed: rejected", old: "{size: xl}", new: "{size: xxl}", want: []string{`spec.size: Invalid value: "xxl": size must be s or m`}},
		{name: "other field changed: the invalid size is ratcheted", old: "{size: xl, owner: a}", new: "{size: xl, owner: b}"},
		{name: "no-op update of odd replicas: the transition rule is not ratcheted", old: "{replicas: 3}", new: "{replicas: 3}", want: []string{`spec.replicas: Invalid value: 3: replicas must grow`}},
		{name: "odd replicas grown: the rule is run again", old: "{replicas: 3}", new: "{replicas: 5}", want: []string{`spec.replicas: Invalid value: 5: replicas must be even`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compile(crd, Options{}).UpdateErrors(context.Background(), "v1", stored(tc.new), stored(tc.old))
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			slices.Sort(tc.want)
			if !slices.Equal(got, tc.want) {
				t.Errorf("update errors:\n got: %q\nwant: %q", got, tc.want)
			}
		})
	}
	if _, err := Compile(crd, Options{}).UpdateErrors(context.Background(), "v2", stored("{}"), stored("{}")); err == nil {
		t.Error("a version without validation: no error")
	}
}
