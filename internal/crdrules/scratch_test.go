package crdrules

import "testing"

func TestScratch(t *testing.T) {
	cases := []struct{ root, body string; opts Options }{
		{root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.nosuch == 1
- rule: self.replicas + 1
- rule: self.replicas < 5
  messageExpression: "self.nosuch"
- rule: self.replicas < 4
  messageExpression: "self.replicas"
properties:
  replicas: {type: integer}
`), body: "spec: {replicas: 7}"},
		{root: specSchema(`type: object
properties:
  v:
    x-kubernetes-int-or-string: true
`), body: "spec: {v: true}"},
		{root: specSchema(`type: object
properties:
  template:
    type: object
    x-kubernetes-embedded-resource: true
    x-kubernetes-preserve-unknown-fields: true
    x-kubernetes-validations:
    - rule: self.kind == 'ConfigMap'
    - rule: self.metadata.name.startsWith('cm-')
`), body: "spec: {template: {apiVersion: v1, kind: ConfigMap, metadata: {name: Bad_Name}}}"},
		{root: specSchema(`type: object
properties:
  template:
    type: object
    x-kubernetes-embedded-resource: true
    x-kubernetes-preserve-unknown-fields: true
    x-kubernetes-validations:
    - rule: self.kind == 'ConfigMap'
`), body: "spec: {template: {metadata: {name: cm-a}}}"},
		{root: specSchema(`type: object
properties:
  set: {type: array, x-kubernetes-list-type: set, items: {type: string}}
  ports:
    type: array
    x-kubernetes-list-type: map
    x-kubernetes-list-map-keys: [name]
    items:
      type: object
      required: [name]
      properties:
        name: {type: string}
        v: {type: integer}
`), body: "spec: {set: [a, b, a], ports: [{name: x, v: 1}, {name: x, v: 2}]}"},
		{root: specSchema(`type: object
properties:
  items:
    type: array
    items: {type: string}
x-kubernetes-validations:
- rule: self.items.all(x, x.startsWith('a'))
`), body: "spec: {items: [a, a, a, a, a, a, a, a, a, a, a, a, a, a, a]}", opts: Options{PerCallLimit: 10}},
		{root: specSchema(`type: object
properties:
  items:
    type: array
    items:
      type: string
      x-kubernetes-validations:
      - rule: self.startsWith('a')
x-kubernetes-validations:
- rule: self.items.size() > 0
`), body: "spec: {items: [a, a, a, a, a, a, a, a, a, a, a, a, a, a, a]}", opts: Options{RuntimeCostBudget: 10}},
		{root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.a == 'x'
- rule: self.b == 'y'
properties:
  a: {type: string}
  b: {type: string}
`), body: "spec: {a: x, b: 'y'}", opts: Options{RuntimeCostBudget: 3}},
		{root: "type: object\nproperties:\n  spec:\n    type: object\n    properties:\n      a: {}\n", body: "spec: {a: 1}"},
		{root: specSchema("type: object\nproperties:\n  a: {type: integer}\n"), body: "metadata: {name: Bad_Name}\nspec: {a: 1}"},
		{root: specSchema("type: object\nproperties:\n  a: {type: integer}\n"), body: "metadata: 12\nspec: {a: 1}"},
		{root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.name == 'a'
  reason: FieldValueDuplicate
- rule: self.name == 'a'
  reason: FieldValueRequired
properties:
  name:
    type: string
    x-kubernetes-validations:
    - rule: self == 'a'
      reason: FieldValueDuplicate
      fieldPath: ''
  a.b:
    type: integer
    x-kubernetes-validations:
    - rule: self > 0
  labels:
    type: object
    additionalProperties: {type: string}
    x-kubernetes-validations:
    - rule: "'k' in self"
      fieldPath: "['k']"
`), body: "spec: {name: b, a.b: 0, labels: {j: x}}"},
	}
	for _, c := range cases {
		t.Log(c.body, dump(findings(t, newCRD(t, c.root), widget(t, c.body), c.opts)))
	}
	t.Log(dump(findings(t, newCRD(t, specSchema("type: object\n")), object(t, "{}"))))
}
