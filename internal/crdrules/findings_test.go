package crdrules

import (
	"reflect"
	"strings"
	"testing"

	"github.com/celaudit/celaudit/internal/audit"
)

// Field error types as the apiserver reports them.
const (
	invalid     = "FieldValueInvalid"
	typeInvalid = "FieldValueTypeInvalid"
	forbidden   = "FieldValueForbidden"
	required    = "FieldValueRequired"
	duplicate   = "FieldValueDuplicate"
	unsupported = "FieldValueNotSupported"
)

// celNotChecked is the apiserver's field error when schema errors keep CEL rules from running.
var celNotChecked = Finding{
	RuleID:     RuleIDValidations,
	Message:    "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
	Reason:     invalid,
	Verdict:    audit.Skip,
	FieldError: true,
}

func fail(ruleID, rule, reason, msg string) Finding {
	return Finding{RuleID: ruleID, Rule: rule, Message: msg, FieldPath: fieldPathOfMessage(msg), Reason: reason, Verdict: audit.Fail, FieldError: true}
}

func errored(ruleID, rule, reason, msg string) Finding {
	f := fail(ruleID, rule, reason, msg)
	f.Verdict = audit.Error
	return f
}

func schemaFail(reason, msg string) Finding {
	return fail(RuleIDSchema, "", reason, msg)
}

func transitionSkip(ruleID, rule, fieldPath string) Finding {
	return Finding{RuleID: ruleID, Rule: rule, Message: transitionSkipMessage, FieldPath: fieldPath, Verdict: audit.Skip}
}

// findingCase is one object validated against one schema, with every finding expected.
type findingCase struct {
	name string
	root string
	opts Options
	body string
	want []Finding
}

// runFindingCases compares the findings of each case with its want exactly, order included. Findings
// documents its order: by field path, then rule, then message, with identical findings listed once; so
// every want lists its findings in that order, written out by hand, and never more than once.
func runFindingCases(t *testing.T, cases []findingCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := findings(t, newCRD(t, tc.root), widget(t, tc.body), tc.opts)
			want := tc.want
			if len(want) == 0 {
				want = nil
			}
			if len(got) == 0 {
				got = nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("object %q:\nwant %s\ngot  %s", tc.body, dump(want), dump(got))
			}
		})
	}
}

func TestMessageExpression(t *testing.T) {
	root := specSchema(`type: object
x-kubernetes-validations:
- rule: self.replicas < 10
  messageExpression: "'replicas must be below 10, got ' + string(self.replicas)"
- rule: self.replicas < 20
  message: replicas must be below 20
  messageExpression: "'optional is ' + self.optional"
- rule: self.replicas < 30
  messageExpression: "''"
- rule: self.replicas < 40
  messageExpression: "'   '"
- rule: self.replicas < 50
  message: "  replicas must be below 50  "
  messageExpression: "'  optional is ' + self.optional + '  '"
properties:
  replicas: {type: integer}
  optional: {type: string}
`)
	runFindingCases(t, []findingCase{
		{
			name: "passes",
			root: root,
			body: "spec: {replicas: 1}",
		},
		{
			name: "evaluated message",
			root: root,
			body: "spec: {replicas: 15}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[0]", "self.replicas < 10", invalid, "spec: Invalid value: replicas must be below 10, got 15"),
			},
		},
		{
			name: "fallback when the expression errors or is empty",
			root: root,
			body: "spec: {replicas: 60}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[0]", "self.replicas < 10", invalid, "spec: Invalid value: replicas must be below 10, got 60"),
				// self.optional is absent: the message expression fails and the message is used.
				fail("spec.x-kubernetes-validations[1]", "self.replicas < 20", invalid, "spec: Invalid value: replicas must be below 20"),
				// An empty or blank message expression falls back to the rule.
				fail("spec.x-kubernetes-validations[2]", "self.replicas < 30", invalid, "spec: Invalid value: failed rule: self.replicas < 30"),
				fail("spec.x-kubernetes-validations[3]", "self.replicas < 40", invalid, "spec: Invalid value: failed rule: self.replicas < 40"),
				fail("spec.x-kubernetes-validations[4]", "self.replicas < 50", invalid, "spec: Invalid value: replicas must be below 50"),
			},
		},
		{
			name: "expression output is trimmed",
			root: root,
			body: "spec: {replicas: 60, optional: set}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[0]", "self.replicas < 10", invalid, "spec: Invalid value: replicas must be below 10, got 60"),
				fail("spec.x-kubernetes-validations[1]", "self.replicas < 20", invalid, "spec: Invalid value: optional is set"),
				fail("spec.x-kubernetes-validations[2]", "self.replicas < 30", invalid, "spec: Invalid value: failed rule: self.replicas < 30"),
				fail("spec.x-kubernetes-validations[3]", "self.replicas < 40", invalid, "spec: Invalid value: failed rule: self.replicas < 40"),
				fail("spec.x-kubernetes-validations[4]", "self.replicas < 50", invalid, "spec: Invalid value: optional is set"),
			},
		},
		{
			name: "message expression that does not compile falls back",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.replicas < 5
  messageExpression: self.nosuch
- rule: self.replicas < 4
  message: too many
  messageExpression: self.replicas
properties:
  replicas: {type: integer}
`),
			body: "spec: {replicas: 7}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[0]", "self.replicas < 5", invalid, "spec: Invalid value: failed rule: self.replicas < 5"),
				fail("spec.x-kubernetes-validations[1]", "self.replicas < 4", invalid, "spec: Invalid value: too many"),
			},
		},
	})
}

func TestReasonAndFieldPath(t *testing.T) {
	root := specSchema(`type: object
x-kubernetes-validations:
- rule: self.name != 'forbidden'
  reason: FieldValueForbidden
  message: name is forbidden
- rule: has(self.owner)
  reason: FieldValueRequired
  message: owner is required
  fieldPath: .owner
- rule: self.name != 'dup'
  reason: FieldValueDuplicate
- rule: self.name != 'invalid'
  reason: FieldValueInvalid
  fieldPath: .name
- rule: "!has(self.labels) || 'k' in self.labels"
  fieldPath: "['labels']['k']"
properties:
  name:
    type: string
    x-kubernetes-validations:
    - rule: self != 'dup'
      reason: FieldValueDuplicate
  owner: {type: string}
  a.b:
    type: integer
    x-kubernetes-validations:
    - rule: self > 0
      fieldPath: ""
  labels:
    type: object
    additionalProperties: {type: string}
`)
	runFindingCases(t, []findingCase{
		{
			name: "forbidden and required",
			root: root,
			body: "spec: {name: forbidden}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[0]", "self.name != 'forbidden'", forbidden, "spec: Forbidden: name is forbidden"),
				fail("spec.x-kubernetes-validations[1]", "has(self.owner)", required, "spec.owner: Required value: owner is required"),
			},
		},
		{
			name: "duplicate prints the value of scalars only",
			root: root,
			body: "spec: {name: dup, owner: me}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[2]", "self.name != 'dup'", duplicate, "spec: Duplicate value"),
				fail("spec.name.x-kubernetes-validations[0]", "self != 'dup'", duplicate, `spec.name: Duplicate value: "dup"`),
			},
		},
		{
			name: "field paths of a property, a quoted property and a map key",
			root: root,
			body: "spec: {name: invalid, owner: me, a.b: 0, labels: {j: x}}",
			// Sorted by field path: spec.a.b, spec.labels[k], spec.name.
			want: []Finding{
				fail("spec['a.b'].x-kubernetes-validations[0]", "self > 0", invalid, "spec.a.b: Invalid value: 0: failed rule: self > 0"),
				fail("spec.x-kubernetes-validations[4]", "!has(self.labels) || 'k' in self.labels", invalid, "spec.labels[k]: Invalid value: failed rule: !has(self.labels) || 'k' in self.labels"),
				fail("spec.x-kubernetes-validations[3]", "self.name != 'invalid'", invalid, "spec.name: Invalid value: failed rule: self.name != 'invalid'"),
			},
		},
	})
}

func TestTransitionRules(t *testing.T) {
	root := specSchema(`type: object
x-kubernetes-validations:
- rule: self.size == oldSelf.size || self.size > oldSelf.size
  message: size can only grow
- rule: self.size < 100
properties:
  size: {type: integer}
  immutable:
    type: string
    x-kubernetes-validations:
    - rule: self == oldSelf
      message: immutable
  created:
    type: string
    x-kubernetes-validations:
    - rule: oldSelf.hasValue() || self != 'forbidden'
      optionalOldSelf: true
      message: cannot be created as forbidden
`)
	runFindingCases(t, []findingCase{
		{
			name: "transition rules of present nodes are skipped",
			root: root,
			body: "spec: {size: 1, immutable: a}",
			want: []Finding{
				transitionSkip("spec.x-kubernetes-validations[0]", "self.size == oldSelf.size || self.size > oldSelf.size", "spec"),
				transitionSkip("spec.immutable.x-kubernetes-validations[0]", "self == oldSelf", "spec.immutable"),
			},
		},
		{
			name: "absent nodes have no skip",
			root: root,
			body: "status: {}",
		},
		{
			name: "optionalOldSelf rules run as on create",
			root: root,
			body: "spec: {size: 200, created: forbidden}",
			want: []Finding{
				transitionSkip("spec.x-kubernetes-validations[0]", "self.size == oldSelf.size || self.size > oldSelf.size", "spec"),
				fail("spec.x-kubernetes-validations[1]", "self.size < 100", invalid, "spec: Invalid value: failed rule: self.size < 100"),
				fail("spec.created.x-kubernetes-validations[0]", "oldSelf.hasValue() || self != 'forbidden'", invalid, `spec.created: Invalid value: "forbidden": cannot be created as forbidden`),
			},
		},
		{
			name: "optionalOldSelf rule passes",
			root: root,
			body: "spec: {size: 1, created: fine}",
			want: []Finding{
				transitionSkip("spec.x-kubernetes-validations[0]", "self.size == oldSelf.size || self.size > oldSelf.size", "spec"),
			},
		},
	})
}

func TestCostLimits(t *testing.T) {
	items15 := "spec: {items: [a, a, a, a, a, a, a, a, a, a, a, a, a, a, a]}"
	runFindingCases(t, []findingCase{
		{
			name: "per call limit from the options",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.items.all(x, x.startsWith('a'))
properties:
  items: {type: array, items: {type: string}}
`),
			opts: Options{PerCallLimit: 10},
			body: items15,
			want: []Finding{
				errored("spec.x-kubernetes-validations[0]", "self.items.all(x, x.startsWith('a'))", invalid,
					`spec: Invalid value: "object": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.items.all(x, x.startsWith('a'))`),
			},
		},
		{
			name: "per call limit of the apiserver",
			// The list has no maxItems, so the estimated cost would make the apiserver refuse the CRD;
			// the engine still answers for each object.
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.items.all(x, self.items.all(y, self.items.all(z, x + y + z != 'nope')))
  message: cubic
- rule: self.items.size() > 1000
  message: never evaluated
properties:
  items: {type: array, items: {type: string}}
`),
			body: "spec: {items: [" + strings.TrimSuffix(strings.Repeat("ab, ", 150), ", ") + "]}",
			want: []Finding{
				errored("spec.x-kubernetes-validations[0]", "self.items.all(x, self.items.all(y, self.items.all(z, x + y + z != 'nope')))", invalid,
					`spec: Invalid value: "object": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: cubic`),
			},
		},
		{
			name: "runtime budget per object, rule under items",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.items.size() > 0
properties:
  items:
    type: array
    items:
      type: string
      x-kubernetes-validations:
      - rule: self.startsWith('a')
`),
			opts: Options{RuntimeCostBudget: 10},
			body: items15,
			want: []Finding{
				errored("spec.items[*].x-kubernetes-validations[0]", "self.startsWith('a')", invalid,
					`spec.items[3]: Invalid value: "string": validation failed due to running out of cost budget, no further validation rules will be run`),
			},
		},
		{
			name: "runtime budget exhausted among several rules of a node",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.a == 'x'
- rule: self.b == 'y'
properties:
  a: {type: string}
  b: {type: string}
`),
			opts: Options{RuntimeCostBudget: 3},
			body: "spec: {a: x, b: 'y'}",
			want: []Finding{
				errored("spec.x-kubernetes-validations", "", invalid,
					`spec: Invalid value: "object": validation failed due to running out of cost budget, no further validation rules will be run`),
			},
		},
		{
			name: "runtime budget exhausted after a failing rule",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.a == 'x'
- rule: self.b == 'y'
properties:
  a: {type: string}
  b: {type: string}
`),
			opts: Options{RuntimeCostBudget: 3},
			body: "spec: {a: z, b: 'y'}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[0]", "self.a == 'x'", invalid, "spec: Invalid value: failed rule: self.a == 'x'"),
				errored("spec.x-kubernetes-validations[1]", "self.b == 'y'", invalid,
					`spec: Invalid value: "object": validation failed due to running out of cost budget, no further validation rules will be run`),
			},
		},
	})
}

func TestRuntimeAndCompileErrors(t *testing.T) {
	runFindingCases(t, []findingCase{
		{
			name: "rules that do not compile",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.nosuch == 1
- rule: self.replicas + 1
- rule: self.replicas < 5
- rule: self.all(k, k != '')
properties:
  replicas: {type: integer}
`),
			body: "spec: {replicas: 7}",
			want: []Finding{
				errored("spec.x-kubernetes-validations[0]", "self.nosuch == 1", invalid,
					"spec: Invalid value: \"object\": rule compile error: compilation failed: ERROR: <input>:1:5: undefined field 'nosuch'\n | self.nosuch == 1\n | ....^"),
				errored("spec.x-kubernetes-validations[1]", "self.replicas + 1", invalid,
					`spec: Invalid value: "object": rule compile error: cel expression must evaluate to a bool`),
				fail("spec.x-kubernetes-validations[2]", "self.replicas < 5", invalid, "spec: Invalid value: failed rule: self.replicas < 5"),
				// The apiserver prints the generated name of the type of self, new at every compilation.
				errored("spec.x-kubernetes-validations[3]", "self.all(k, k != '')", invalid,
					"spec: Invalid value: \"object\": rule compile error: compilation failed: ERROR: <input>:1:1: expression of type 'selfType' cannot be range of a comprehension (must be list, map, or dynamic)\n | self.all(k, k != '')\n | ^"),
			},
		},
		{
			name: "rules of a node without a type cannot be compiled",
			root: "x-kubernetes-validations:\n- rule: self.spec.a == 1\n- rule: 'true'\nproperties:\n  spec: {type: object}\n",
			body: "spec: {}",
			want: []Finding{
				errored("x-kubernetes-validations", "", invalid,
					`<nil>: Invalid value: "": rule compiler initialization error: failed to convert to declType for CEL validation rules`),
			},
		},
		{
			name: "a rule that does not compile on an absent node is not run",
			root: specSchema(`type: object
properties:
  child:
    type: object
    x-kubernetes-validations:
    - rule: self.nosuch == 1
`),
			body: "spec: {}",
		},
		{
			name: "runtime errors",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.m['missing'] == 'x'
- rule: 10 / self.zero == 1
  message: division
- rule: self.ios.startsWith('x')
properties:
  m: {type: object, additionalProperties: {type: string}}
  zero: {type: integer}
  ios: {x-kubernetes-int-or-string: true}
`),
			body: "spec: {m: {}, zero: 0, ios: 1}",
			want: []Finding{
				errored("spec.x-kubernetes-validations[0]", "self.m['missing'] == 'x'", invalid,
					`spec: Invalid value: "object": no such key: missing evaluating rule: self.m['missing'] == 'x'`),
				errored("spec.x-kubernetes-validations[1]", "10 / self.zero == 1", invalid,
					`spec: Invalid value: "object": division by zero evaluating rule: division`),
				errored("spec.x-kubernetes-validations[2]", "self.ios.startsWith('x')", invalid,
					`spec: Invalid value: "object": 'no such overload': call arguments did not match a supported operator, function or macro signature for rule: self.ios.startsWith('x')`),
			},
		},
	})
}

func TestAttribution(t *testing.T) {
	runFindingCases(t, []findingCase{
		{
			name: "only the second of two message expressions fails",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.a < 10
  messageExpression: "'a is ' + string(self.a)"
- rule: self.b < 10
  messageExpression: "'b is ' + string(self.b)"
properties:
  a: {type: integer}
  b: {type: integer}
`),
			body: "spec: {a: 1, b: 20}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[1]", "self.b < 10", invalid, "spec: Invalid value: b is 20"),
			},
		},
		{
			name: "only the second of two rules with the same message fails",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.a < 10
  message: out of range
- rule: self.b < 10
  message: out of range
properties:
  a: {type: integer}
  b: {type: integer}
`),
			body: "spec: {a: 1, b: 20}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[1]", "self.b < 10", invalid, "spec: Invalid value: out of range"),
			},
		},
		{
			name: "both rules with the same message fail",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.a < 10
  message: out of range
- rule: self.b < 10
  message: out of range
properties:
  a: {type: integer}
  b: {type: integer}
`),
			body: "spec: {a: 11, b: 20}",
			want: []Finding{
				fail("spec.x-kubernetes-validations[0]", "self.a < 10", invalid, "spec: Invalid value: out of range"),
				fail("spec.x-kubernetes-validations[1]", "self.b < 10", invalid, "spec: Invalid value: out of range"),
			},
		},
		{
			name: "a parent rule reporting at a child's path",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.child.size() > 1
  fieldPath: .child
  message: too short
properties:
  child:
    type: string
    x-kubernetes-validations:
    - rule: self.size() > 2
      message: too short
`),
			body: "spec: {child: x}",
			// One field path: ordered by rule, and "spec.child..." sorts before "spec.x-...".
			want: []Finding{
				fail("spec.child.x-kubernetes-validations[0]", "self.size() > 2", invalid, `spec.child: Invalid value: "x": too short`),
				fail("spec.x-kubernetes-validations[0]", "self.child.size() > 1", invalid, "spec.child: Invalid value: too short"),
			},
		},
		{
			name: "rules of allOf branches",
			root: specSchema(`type: object
x-kubernetes-validations:
- rule: self.a >= 0
allOf:
- x-kubernetes-validations:
  - rule: self.a < 10
    message: out of range
- x-kubernetes-validations:
  - rule: self.b < 10
    message: out of range
properties:
  a: {type: integer}
  b: {type: integer}
`),
			body: "spec: {a: 1, b: 20}",
			want: []Finding{
				fail("spec.allOf[1].x-kubernetes-validations[0]", "self.b < 10", invalid, "spec: Invalid value: out of range"),
			},
		},
		{
			// The apiserver looks for rules on the schema's spine only: rules that exist only in allOf
			// branches are never run.
			name: "rules only in allOf branches are not run",
			root: specSchema(`type: object
allOf:
- x-kubernetes-validations:
  - rule: self.a < 10
properties:
  a: {type: integer}
`),
			body: "spec: {a: 20}",
		},
	})
}

// TestSortFindings checks the order and the de-duplication every result of Findings goes through, on
// findings given out of order: by field path, then rule, then message, and identical findings once.
func TestSortFindings(t *testing.T) {
	var (
		// The object itself: field path "" sorts first.
		object = celNotChecked
		// Field path "spec": rule [0] sorts before rule [1] though its message sorts after.
		rule0z = fail("spec.x-kubernetes-validations[0]", "self.a", invalid, "spec: Invalid value: z")
		rule1a = fail("spec.x-kubernetes-validations[1]", "self.b", invalid, "spec: Invalid value: a")
		rule1b = fail("spec.x-kubernetes-validations[1]", "self.b", invalid, "spec: Invalid value: b")
		// Field path "spec.a" sorts after "spec", though its rule "schema" sorts before "spec.x-...".
		schemaA = schemaFail(invalid, "spec.a: Invalid value: 1: too big")
		schemaB = schemaFail(invalid, "spec.b: Invalid value: 1: too big")
	)
	cases := []struct {
		name string
		in   []Finding
		want []Finding
	}{
		{
			name: "empty",
		},
		{
			name: "already sorted",
			in:   []Finding{object, rule0z, rule1a, rule1b, schemaA, schemaB},
			want: []Finding{object, rule0z, rule1a, rule1b, schemaA, schemaB},
		},
		{
			name: "reversed",
			in:   []Finding{schemaB, schemaA, rule1b, rule1a, rule0z, object},
			want: []Finding{object, rule0z, rule1a, rule1b, schemaA, schemaB},
		},
		{
			name: "field path first, then rule, then message",
			in:   []Finding{schemaA, rule1b, object, rule1a, schemaB, rule0z},
			want: []Finding{object, rule0z, rule1a, rule1b, schemaA, schemaB},
		},
		{
			name: "identical findings once",
			in:   []Finding{schemaB, rule1a, schemaB, object, rule1a, schemaB, object},
			want: []Finding{object, rule1a, schemaB},
		},
		{
			name: "findings that differ only in their message are both kept",
			in:   []Finding{rule1b, rule1a, rule1b},
			want: []Finding{rule1a, rule1b},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := sortFindings(append([]Finding(nil), tc.in...))
			if !reflect.DeepEqual(append([]Finding{}, got...), append([]Finding{}, tc.want...)) {
				t.Errorf("want %s\ngot  %s", dump(tc.want), dump(got))
			}
		})
	}
}
