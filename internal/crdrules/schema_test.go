package crdrules

import (
	"testing"
)

func TestNestedRules(t *testing.T) {
	root := specSchema(`type: object
properties:
  items:
    type: array
    items:
      type: object
      x-kubernetes-validations:
      - rule: self.size > 0
        message: size must be positive
      - rule: self.name.startsWith('w-')
      properties:
        name: {type: string}
        size: {type: integer}
        tags:
          type: array
          items:
            type: string
            x-kubernetes-validations:
            - rule: self.size() <= 3
  byName:
    type: object
    additionalProperties:
      type: object
      x-kubernetes-validations:
      - rule: self.enabled
      properties:
        enabled: {type: boolean}
  matrix:
    type: array
    items:
      type: array
      items:
        type: integer
        x-kubernetes-validations:
        - rule: self >= 0
`)
	runFindingCases(t, []findingCase{
		{
			name: "passes",
			root: root,
			body: "spec: {items: [{name: w-a, size: 1, tags: [ok]}], byName: {one: {enabled: true}}, matrix: [[0, 1], [2]]}",
		},
		{
			name: "every failing element is reported at its path",
			root: root,
			body: "spec: {items: [{name: w-a, size: 1, tags: [ok, toolong]}, {name: b, size: 0}], byName: {one: {enabled: true}, two: {enabled: false}}, matrix: [[0, -1], [-2]]}",
			want: []Finding{
				fail("spec.byName[*].x-kubernetes-validations[0]", "self.enabled", invalid, "spec.byName[two]: Invalid value: failed rule: self.enabled"),
				fail("spec.items[*].tags[*].x-kubernetes-validations[0]", "self.size() <= 3", invalid, `spec.items[0].tags[1]: Invalid value: "toolong": failed rule: self.size() <= 3`),
				fail("spec.items[*].x-kubernetes-validations[0]", "self.size > 0", invalid, "spec.items[1]: Invalid value: size must be positive"),
				fail("spec.items[*].x-kubernetes-validations[1]", "self.name.startsWith('w-')", invalid, "spec.items[1]: Invalid value: failed rule: self.name.startsWith('w-')"),
				fail("spec.matrix[*][*].x-kubernetes-validations[0]", "self >= 0", invalid, "spec.matrix[0][1]: Invalid value: -1: failed rule: self >= 0"),
				fail("spec.matrix[*][*].x-kubernetes-validations[0]", "self >= 0", invalid, "spec.matrix[1][0]: Invalid value: -2: failed rule: self >= 0"),
			},
		},
	})
}

func TestEscapedPropertyNames(t *testing.T) {
	root := specSchema(`type: object
x-kubernetes-validations:
- rule: self.x__dash__y == 'ok'
- rule: self.a__dot__b > 0
- rule: self.__namespace__ == 'ns'
- rule: self.s__slash__t == 'ok'
- rule: self.u__underscores__v == 'ok'
properties:
  x-y: {type: string}
  a.b: {type: integer}
  namespace: {type: string}
  s/t: {type: string}
  u__v: {type: string}
  has space:
    type: string
    x-kubernetes-validations:
    - rule: self == 'ok'
`)
	runFindingCases(t, []findingCase{
		{
			name: "passes",
			root: root,
			body: "spec: {x-y: ok, a.b: 1, namespace: ns, s/t: ok, u__v: ok, has space: ok}",
		},
		{
			name: "fails",
			root: root,
			body: "spec: {x-y: bad, a.b: 0, namespace: other, s/t: bad, u__v: bad, has space: bad}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[0]", "self.x__dash__y == 'ok'", invalid, "spec: Invalid value: failed rule: self.x__dash__y == 'ok'"),
				fail("spec.x-kubernetes-validations[1]", "self.a__dot__b > 0", invalid, "spec: Invalid value: failed rule: self.a__dot__b > 0"),
				fail("spec.x-kubernetes-validations[2]", "self.__namespace__ == 'ns'", invalid, "spec: Invalid value: failed rule: self.__namespace__ == 'ns'"),
				fail("spec.x-kubernetes-validations[3]", "self.s__slash__t == 'ok'", invalid, "spec: Invalid value: failed rule: self.s__slash__t == 'ok'"),
				fail("spec.x-kubernetes-validations[4]", "self.u__underscores__v == 'ok'", invalid, "spec: Invalid value: failed rule: self.u__underscores__v == 'ok'"),
				fail("spec['has space'].x-kubernetes-validations[0]", "self == 'ok'", invalid, `spec.has space: Invalid value: "bad": failed rule: self == 'ok'`),
			},
		},
	})
}

func TestIntOrString(t *testing.T) {
	root := specSchema(`type: object
properties:
  port:
    x-kubernetes-int-or-string: true
    x-kubernetes-validations:
    - rule: "type(self) == int ? self > 0 : self.matches('^[a-z]+$')"
      message: must be a positive number or a name
`)
	runFindingCases(t, []findingCase{
		{name: "int", root: root, body: "spec: {port: 80}"},
		{name: "string", root: root, body: "spec: {port: http}"},
		{
			name: "bad int",
			root: root,
			body: "spec: {port: 0}",
			want: []Finding{
				fail("spec.port.x-kubernetes-validations[0]", "type(self) == int ? self > 0 : self.matches('^[a-z]+$')", invalid, "spec.port: Invalid value: 0: must be a positive number or a name"),
			},
		},
		{
			name: "bad string",
			root: root,
			body: "spec: {port: HTTP}",
			want: []Finding{
				fail("spec.port.x-kubernetes-validations[0]", "type(self) == int ? self > 0 : self.matches('^[a-z]+$')", invalid, `spec.port: Invalid value: "HTTP": must be a positive number or a name`),
			},
		},
		{
			name: "neither int nor string",
			root: root,
			body: "spec: {port: true}",
			want: []Finding{
				// celNotChecked is at the object itself, whose field path "" sorts first.
				celNotChecked,
				schemaFail(typeInvalid, `spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"`),
			},
		},
	})
}

func TestEmbeddedResources(t *testing.T) {
	root := specSchema(`type: object
properties:
  template:
    type: object
    x-kubernetes-embedded-resource: true
    x-kubernetes-preserve-unknown-fields: true
    x-kubernetes-validations:
    - rule: self.kind == 'ConfigMap'
    - rule: self.metadata.name.startsWith('cm-')
`)
	runFindingCases(t, []findingCase{
		{
			name: "passes",
			root: root,
			body: "spec: {template: {apiVersion: v1, kind: ConfigMap, metadata: {name: cm-a}, data: {k: v}}}",
		},
		{
			name: "rules see the embedded type and metadata",
			root: root,
			body: "spec: {template: {apiVersion: v1, kind: Secret, metadata: {name: secret}}}",
			want: []Finding{
				fail("spec.template.x-kubernetes-validations[0]", "self.kind == 'ConfigMap'", invalid, "spec.template: Invalid value: failed rule: self.kind == 'ConfigMap'"),
				fail("spec.template.x-kubernetes-validations[1]", "self.metadata.name.startsWith('cm-')", invalid, "spec.template: Invalid value: failed rule: self.metadata.name.startsWith('cm-')"),
			},
		},
		{
			name: "embedded object meta is validated",
			root: root,
			body: "spec: {template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a/b}}}",
			want: []Finding{
				fail("spec.template.x-kubernetes-validations[1]", "self.metadata.name.startsWith('cm-')", invalid, "spec.template: Invalid value: failed rule: self.metadata.name.startsWith('cm-')"),
				schemaFail(invalid, `spec.template.metadata.name: Invalid value: "a/b": may not contain '/'`),
			},
		},
		{
			name: "missing type meta blocks the rules",
			root: root,
			body: "spec: {template: {metadata: {name: cm-a}}}",
			want: []Finding{
				celNotChecked,
				schemaFail(required, "spec.template.apiVersion: Required value"),
				schemaFail(required, "spec.template.kind: Required value"),
			},
		},
	})
}

func TestListTypes(t *testing.T) {
	root := specSchema(`type: object
x-kubernetes-validations:
- rule: self.set.size() < 3
properties:
  set: {type: array, x-kubernetes-list-type: set, items: {type: string}}
  ports:
    type: array
    x-kubernetes-list-type: map
    x-kubernetes-list-map-keys: [name, protocol]
    items:
      type: object
      required: [name]
      properties:
        name: {type: string}
        protocol: {type: string, default: TCP}
        port: {type: integer}
`)
	runFindingCases(t, []findingCase{
		{
			name: "unique",
			root: root,
			body: "spec: {set: [a, b], ports: [{name: x, protocol: TCP, port: 1}, {name: x, protocol: UDP, port: 1}]}",
		},
		{
			// Duplicates do not keep the rules from running.
			name: "duplicates",
			root: root,
			body: "spec: {set: [a, b, a], ports: [{name: x, protocol: TCP, port: 1}, {name: x, protocol: TCP, port: 2}]}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[0]", "self.set.size() < 3", invalid, "spec: Invalid value: failed rule: self.set.size() < 3"),
				schemaFail(duplicate, `spec.ports[1]: Duplicate value: {"name":"x","protocol":"TCP"}`),
				schemaFail(duplicate, `spec.set[2]: Duplicate value: "a"`),
			},
		},
	})
}

func TestSchemaChecks(t *testing.T) {
	root := specSchema(`type: object
required: [name]
x-kubernetes-validations:
- rule: self.name != 'forbidden'
properties:
  name: {type: string, pattern: '^[a-z]+$', maxLength: 10}
  mode: {type: string, enum: [fast, slow]}
  replicas: {type: integer, minimum: 0, maximum: 10}
  ratio: {type: number, multipleOf: 0.5}
  when: {type: string, format: date-time}
  tags: {type: array, maxItems: 2, items: {type: string}}
`)
	runFindingCases(t, []findingCase{
		{
			name: "passes",
			root: root,
			body: "spec: {name: abc, mode: fast, replicas: 3, ratio: 1.5, when: '2024-01-01T00:00:00Z', tags: [a]}",
		},
		{
			// Patterns and bounds do not block the rules.
			name: "maximum and multipleOf",
			root: root,
			body: "spec: {name: forbidden, replicas: 11, ratio: 0.3}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[0]", "self.name != 'forbidden'", invalid, "spec: Invalid value: failed rule: self.name != 'forbidden'"),
				schemaFail(invalid, "spec.ratio: Invalid value: 0.3: spec.ratio in body should be a multiple of 0.5"),
				schemaFail(invalid, "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"),
			},
		},
		{
			name: "pattern",
			root: root,
			body: "spec: {name: ABC, replicas: -1}",
			want: []Finding{
				schemaFail(invalid, `spec.name: Invalid value: "ABC": spec.name in body should match '^[a-z]+$'`),
				schemaFail(invalid, "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"),
			},
		},
		{
			// Enum, required, too long and too many block the rules, as on the apiserver.
			name: "enum blocks the rules",
			root: root,
			body: "spec: {name: forbidden, mode: medium}",
			want: []Finding{
				celNotChecked,
				schemaFail(unsupported, `spec.mode: Unsupported value: "medium": supported values: "fast", "slow"`),
			},
		},
		{
			name: "required, maxLength and maxItems block the rules",
			root: root,
			body: "spec: {tags: [a, b, c]}\nstatus: {}",
			want: []Finding{
				celNotChecked,
				schemaFail(required, "spec.name: Required value"),
				schemaFail("FieldValueTooMany", "spec.tags: Too many: 3: must have at most 2 items"),
			},
		},
		{
			name: "format",
			root: root,
			body: "spec: {name: abc, when: yesterday}",
			want: []Finding{
				celNotChecked,
				schemaFail(typeInvalid, `spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"`),
			},
		},
		{
			name: "too long",
			root: root,
			body: "spec: {name: abcdefghijklmnop}",
			want: []Finding{
				celNotChecked,
				schemaFail("FieldValueTooLong", "spec.name: Too long: may not be more than 10 bytes"),
			},
		},
	})
}

func TestObjectMetaAndTypeMeta(t *testing.T) {
	root := specSchema("type: object\nproperties:\n  a: {type: integer}\n")
	crd := newCRD(t, root)
	cases := []struct {
		name string
		obj  string
		want []Finding
	}{
		{
			name: "metadata as stored passes",
			obj: `apiVersion: example.com/v1
kind: Widget
metadata:
  name: x
  namespace: default
  uid: 6b1f0a52-8c1e-4a8e-9d4b-1f0e5f7c2a11
  resourceVersion: "12345"
  generation: 3
  creationTimestamp: "2024-05-01T10:00:00Z"
  labels: {app: demo}
  annotations: {note: "x"}
  finalizers: [example.com/cleanup]
  ownerReferences:
  - {apiVersion: apps/v1, kind: Deployment, name: d, uid: 0c3f6a2e-1111-4a8e-9d4b-1f0e5f7c2a11, controller: true}
  managedFields:
  - manager: kubectl
    operation: Apply
    apiVersion: example.com/v1
    time: "2024-05-01T10:00:00Z"
    fieldsType: FieldsV1
    fieldsV1: {"f:spec": {"f:a": {}}}
spec: {a: 1}
`,
		},
		{
			name: "invalid name",
			obj:  "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: Bad_Name, namespace: default}\n",
			want: []Finding{
				schemaFail(invalid, `metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`),
			},
		},
		{
			name: "wrong apiVersion",
			obj:  "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: x, namespace: default}\n",
			want: []Finding{
				schemaFail(invalid, `apiVersion: Invalid value: "example.com/v2": must be example.com/v1`),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := findings(t, crd, object(t, tc.obj))
			if !equalFindings(got, tc.want) {
				t.Errorf("want %s\ngot  %s", dump(tc.want), dump(got))
			}
		})
	}
}

func TestScaleSubresource(t *testing.T) {
	root := `type: object
properties:
  apiVersion: {type: string}
  kind: {type: string}
  metadata: {type: object}
  spec:
    type: object
    properties:
      replicas: {type: integer}
  status:
    type: object
    properties:
      replicas: {type: integer}
`
	crd := newCRD(t, root, withScale(".spec.replicas", ".status.replicas"))
	got := findings(t, crd, widget(t, "spec: {replicas: -1}\nstatus: {replicas: 2147483648}"))
	want := []Finding{
		schemaFail(invalid, ".spec.replicas: Invalid value: -1: should be a non-negative integer"),
		schemaFail(invalid, ".status.replicas: Invalid value: 2147483648: should be less than or equal to 2147483647"),
	}
	if !equalFindings(got, want) {
		t.Errorf("want %s\ngot  %s", dump(want), dump(got))
	}
}

// equalFindings reports whether got is want exactly, order included (see runFindingCases).
func equalFindings(got, want []Finding) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
