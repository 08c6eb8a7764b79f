package crdrules

import (
	"slices"
	"testing"
)

func TestProblems(t *testing.T) {
	const badRules = `type: object
x-kubernetes-validations:
- rule: self.replicas < 5
- rule: self.nosuch == 1
properties:
  replicas: {type: integer}
  items:
    type: array
    items:
      type: object
      x-kubernetes-validations:
      - rule: self.all(k, k != '')
  child:
    type: object
    x-kubernetes-validations:
    - rule: 1 + 1
`
	cases := []struct {
		name string
		root string
		opts []func(*testing.T) crdOption
		want []string
	}{{
		name: "rules that compile",
		root: specSchema("type: object\nx-kubernetes-validations:\n- rule: self.replicas < 5\nproperties:\n  replicas: {type: integer}\n"),
		want: nil,
	}, {
		name: "rules that do not compile, in schema order, whether or not an object has their node",
		root: specSchema(badRules),
		want: []string{
			"version v1, spec.x-kubernetes-validations[1]: rule compile error: compilation failed: ERROR: <input>:1:5: undefined field 'nosuch'\n | self.nosuch == 1\n | ....^",
			"version v1, spec.child.x-kubernetes-validations[0]: rule compile error: cel expression must evaluate to a bool",
			"version v1, spec.items[*].x-kubernetes-validations[0]: rule compile error: compilation failed: ERROR: <input>:1:1: expression of type 'selfType' cannot be range of a comprehension (must be list, map, or dynamic)\n | self.all(k, k != '')\n | ^",
		},
	}, {
		name: "a node whose rules cannot be compiled at all",
		root: "x-kubernetes-validations:\n- rule: self.spec.a == 1\nproperties:\n  spec: {type: object}\n",
		want: []string{"version v1, x-kubernetes-validations: rule compiler initialization error: failed to convert to declType for CEL validation rules"},
	}, {
		name: "a version whose validation cannot be built",
		root: specSchema("type: object\nproperties:\n  a: {$ref: '#/definitions/a'}\n"),
		want: []string{"cannot validate version v1: the schema is not structural: OpenAPIV3Schema '$ref' is not supported"},
	}, {
		name: "each served version, by name; not the versions that are not served",
		root: specSchema("type: object\nx-kubernetes-validations:\n- rule: self.nosuch == 1\n"),
		opts: []func(*testing.T) crdOption{
			func(t *testing.T) crdOption {
				return withVersion(t, "v0", true, specSchema("type: object\nx-kubernetes-validations:\n- rule: '1'\n"))
			},
			func(t *testing.T) crdOption {
				return withVersion(t, "v2", false, specSchema("type: object\nx-kubernetes-validations:\n- rule: '2'\n"))
			},
		},
		want: []string{
			"version v0, spec.x-kubernetes-validations[0]: rule compile error: cel expression must evaluate to a bool",
			"version v1, spec.x-kubernetes-validations[0]: rule compile error: compilation failed: ERROR: <input>:1:5: undefined field 'nosuch'\n | self.nosuch == 1\n | ....^",
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var opts []crdOption
			for _, o := range tc.opts {
				opts = append(opts, o(t))
			}
			got := Compile(newCRD(t, tc.root, opts...), Options{}).Problems()
			if !slices.Equal(got, tc.want) {
				t.Errorf("Problems() =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
