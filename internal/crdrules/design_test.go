package crdrules

import (
	"testing"

	"github.com/celaudit/celaudit/internal/audit"
)

// TestDesignExampleRules checks every example rule of the CRD validation rules design (KEP-2876), with
// its typos fixed, on an object that satisfies it and on one that breaks it.
func TestDesignExampleRules(t *testing.T) {
	cases := []struct {
		name string
		// root is the openAPIV3Schema.
		root string
		// rule is the expression, as a check that the schema holds it.
		rule   string
		ruleID string
		passes []string
		fails  string
		// message is the apiserver's field error for fails.
		message string
	}{
		{
			name: "ordered replicas",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas
properties:
  minReplicas: {type: integer}
  replicas: {type: integer}
  maxReplicas: {type: integer}
`),
			rule:    "self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas",
			ruleID:  "spec.x-kubernetes-validations[0]",
			passes:  []string{"spec: {minReplicas: 1, replicas: 2, maxReplicas: 3}", "spec: {minReplicas: 2, replicas: 2, maxReplicas: 2}"},
			fails:   "spec: {minReplicas: 1, replicas: 5, maxReplicas: 3}",
			message: "spec: Invalid value: failed rule: self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas",
		},
		{
			name: "map key presence",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: "'Available' in self.stateCounts"
properties:
  stateCounts:
    type: object
    additionalProperties: {type: integer}
`),
			rule:    "'Available' in self.stateCounts",
			ruleID:  "spec.x-kubernetes-validations[0]",
			passes:  []string{"spec: {stateCounts: {Available: 2, Pending: 1}}"},
			fails:   "spec: {stateCounts: {Pending: 1}}",
			message: "spec: Invalid value: failed rule: 'Available' in self.stateCounts",
		},
		{
			name: "one of two lists",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: (self.list1.size() == 0) != (self.list2.size() == 0)
properties:
  list1: {type: array, items: {type: string}}
  list2: {type: array, items: {type: string}}
`),
			rule:    "(self.list1.size() == 0) != (self.list2.size() == 0)",
			ruleID:  "spec.x-kubernetes-validations[0]",
			passes:  []string{"spec: {list1: [a], list2: []}", "spec: {list1: [], list2: [b]}"},
			fails:   "spec: {list1: [a], list2: [b]}",
			message: "spec: Invalid value: failed rule: (self.list1.size() == 0) != (self.list2.size() == 0)",
		},
		{
			name: "value of a map key if present",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: "!('MY_KEY' in self.map1) || self.map1['MY_KEY'].matches('^[a-zA-Z]*$')"
properties:
  map1:
    type: object
    additionalProperties: {type: string}
`),
			rule:    "!('MY_KEY' in self.map1) || self.map1['MY_KEY'].matches('^[a-zA-Z]*$')",
			ruleID:  "spec.x-kubernetes-validations[0]",
			passes:  []string{"spec: {map1: {OTHER: '1'}}", "spec: {map1: {MY_KEY: abc}}"},
			fails:   "spec: {map1: {MY_KEY: abc1}}",
			message: "spec: Invalid value: failed rule: !('MY_KEY' in self.map1) || self.map1['MY_KEY'].matches('^[a-zA-Z]*$')",
		},
		{
			name: "listMap entry with key MY_ENV",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.envars.filter(e, e.name == 'MY_ENV').all(e, e.value.matches('^[a-zA-Z]*$'))
properties:
  envars:
    type: array
    x-kubernetes-list-type: map
    x-kubernetes-list-map-keys: [name]
    items:
      type: object
      required: [name]
      properties:
        name: {type: string}
        value: {type: string}
`),
			rule:    "self.envars.filter(e, e.name == 'MY_ENV').all(e, e.value.matches('^[a-zA-Z]*$'))",
			ruleID:  "spec.x-kubernetes-validations[0]",
			passes:  []string{"spec: {envars: [{name: MY_ENV, value: abc}, {name: OTHER, value: '123'}]}"},
			fails:   "spec: {envars: [{name: MY_ENV, value: abc1}]}",
			message: "spec: Invalid value: failed rule: self.envars.filter(e, e.name == 'MY_ENV').all(e, e.value.matches('^[a-zA-Z]*$'))",
		},
		{
			name: "expired after created plus ttl",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: has(self.expired) && self.created + self.ttl < self.expired
properties:
  created: {type: string, format: date-time}
  ttl: {type: string, format: duration}
  expired: {type: string, format: date-time}
`),
			rule:    "has(self.expired) && self.created + self.ttl < self.expired",
			ruleID:  "spec.x-kubernetes-validations[0]",
			passes:  []string{"spec: {created: '2024-01-01T00:00:00Z', ttl: 1h, expired: '2024-01-01T02:00:00Z'}"},
			fails:   "spec: {created: '2024-01-01T00:00:00Z', ttl: 3h, expired: '2024-01-01T02:00:00Z'}",
			message: "spec: Invalid value: failed rule: has(self.expired) && self.created + self.ttl < self.expired",
		},
		{
			name: "string prefix",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.health.startsWith('ok')
properties:
  health: {type: string}
`),
			rule:    "self.health.startsWith('ok')",
			ruleID:  "spec.x-kubernetes-validations[0]",
			passes:  []string{"spec: {health: okay}"},
			fails:   "spec: {health: degraded}",
			message: "spec: Invalid value: failed rule: self.health.startsWith('ok')",
		},
		{
			name: "listMap item with key x",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.widgets.exists(w, w.key == 'x' && w.foo < 10)
properties:
  widgets:
    type: array
    x-kubernetes-list-type: map
    x-kubernetes-list-map-keys: [key]
    items:
      type: object
      required: [key]
      properties:
        key: {type: string}
        foo: {type: integer}
`),
			rule:    "self.widgets.exists(w, w.key == 'x' && w.foo < 10)",
			ruleID:  "spec.x-kubernetes-validations[0]",
			passes:  []string{"spec: {widgets: [{key: 'y', foo: 50}, {key: x, foo: 9}]}"},
			fails:   "spec: {widgets: [{key: 'y', foo: 1}, {key: x, foo: 10}]}",
			message: "spec: Invalid value: failed rule: self.widgets.exists(w, w.key == 'x' && w.foo < 10)",
		},
		{
			name: "int-or-string",
			root: specSchema(`type: object
properties:
  limit:
    x-kubernetes-int-or-string: true
    x-kubernetes-validations:
    - rule: "type(self) == string ? self == '100%' : self == 1000"
`),
			rule:    "type(self) == string ? self == '100%' : self == 1000",
			ruleID:  "spec.limit.x-kubernetes-validations[0]",
			passes:  []string{"spec: {limit: '100%'}", "spec: {limit: 1000}"},
			fails:   "spec: {limit: 5}",
			message: "spec.limit: Invalid value: 5: failed rule: type(self) == string ? self == '100%' : self == 1000",
		},
		{
			name: "singleton name",
			root: `type: object
x-kubernetes-validations:
- rule: self.metadata.name == 'singleton'
properties:
  apiVersion: {type: string}
  kind: {type: string}
  metadata: {type: object}
  spec: {type: object}
`,
			rule:    "self.metadata.name == 'singleton'",
			ruleID:  "x-kubernetes-validations[0]",
			passes:  []string{"metadata: {name: singleton, namespace: default}"},
			fails:   "spec: {}",
			message: "<nil>: Invalid value: failed rule: self.metadata.name == 'singleton'",
		},
		{
			name: "disjoint sets",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.set1.all(e, !(e in self.set2))
properties:
  set1: {type: array, x-kubernetes-list-type: set, items: {type: string}}
  set2: {type: array, x-kubernetes-list-type: set, items: {type: string}}
`),
			rule:    "self.set1.all(e, !(e in self.set2))",
			ruleID:  "spec.x-kubernetes-validations[0]",
			passes:  []string{"spec: {set1: [a, b], set2: [c]}"},
			fails:   "spec: {set1: [a, b], set2: [b, c]}",
			message: "spec: Invalid value: failed rule: self.set1.all(e, !(e in self.set2))",
		},
		{
			name: "details keyed by names",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.names.size() == self.details.size() && self.names.all(n, n in self.details)
properties:
  names: {type: array, x-kubernetes-list-type: set, items: {type: string}}
  details:
    type: object
    additionalProperties: {type: string}
`),
			rule:    "self.names.size() == self.details.size() && self.names.all(n, n in self.details)",
			ruleID:  "spec.x-kubernetes-validations[0]",
			passes:  []string{"spec: {names: [a, b], details: {a: x, b: 'y'}}"},
			fails:   "spec: {names: [a, b], details: {a: x, c: 'y'}}",
			message: "spec: Invalid value: failed rule: self.names.size() == self.details.size() && self.names.all(n, n in self.details)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			crd := newCRD(t, tc.root)
			for _, body := range tc.passes {
				obj := widget(t, body)
				if fs := findings(t, crd, obj); len(fs) != 0 {
					t.Errorf("object %q: want no findings, got %s", body, dump(fs))
				}
			}
			fs := findings(t, crd, widget(t, tc.fails))
			want := Finding{
				RuleID:     tc.ruleID,
				Rule:       tc.rule,
				Message:    tc.message,
				FieldPath:  fieldPathOfMessage(tc.message),
				Reason:     "FieldValueInvalid",
				Verdict:    audit.Fail,
				FieldError: true,
			}
			if len(fs) != 1 || fs[0] != want {
				t.Errorf("object %q:\nwant %s\ngot  %s", tc.fails, dump([]Finding{want}), dump(fs))
			}
		})
	}
}

// fieldPathOfMessage is the path a field error message starts with, "" for the object itself.
func fieldPathOfMessage(msg string) string {
	for i := 0; i+1 < len(msg); i++ {
		if msg[i] == ':' && msg[i+1] == ' ' {
			if msg[:i] == "<nil>" {
				return ""
			}
			return msg[:i]
		}
	}
	return ""
}
