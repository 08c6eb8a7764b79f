package audit

import "testing"

func TestRuleName(t *testing.T) {
	cases := []struct {
		base       string
		qualifiers []string
		want       string
	}{
		{"validations[0]", nil, "validations[0]"},
		{"validations[0]", []string{"", ""}, "validations[0]"},
		{"validations[0]", []string{"binding b"}, "validations[0] (binding b)"},
		{"validations[0]", []string{"binding b", "", "pod template"}, "validations[0] (binding b, pod template)"},
		{"schema: spec.replicas", []string{"Invalid value", "version v1"}, "schema: spec.replicas (Invalid value, version v1)"},
	}
	for _, c := range cases {
		if got := RuleName(c.base, c.qualifiers...); got != c.want {
			t.Errorf("RuleName(%q, %q) = %q, want %q", c.base, c.qualifiers, got, c.want)
		}
	}
}

func TestDistinctRules(t *testing.T) {
	obj := ObjectRef{Kind: "Widget", Name: "w", UID: "u"}
	other := ObjectRef{Kind: "Widget", Name: "v", UID: "v"}
	result := func(rule string, v Verdict, ref ObjectRef) Result {
		return Result{Policy: "p", Rule: rule, Verdict: v, Resource: ref}
	}
	cases := []struct {
		name string
		in   []Result
		want []string
	}{
		{"distinct", []Result{result("a", Fail, obj), result("b", Fail, obj)}, []string{"a", "b"}},
		{"verdicts differ", []Result{result("a", Fail, obj), result("a", Warn, obj)}, []string{"a", "a"}},
		{"objects differ", []Result{result("a", Fail, obj), result("a", Fail, other)}, []string{"a", "a"}},
		{"numbered in order", []Result{result("a", Fail, obj), result("b", Fail, obj), result("a", Fail, obj), result("a", Fail, obj)},
			[]string{"a", "b", "a #2", "a #3"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			DistinctRules(c.in)
			for i, r := range c.in {
				if r.Rule != c.want[i] {
					t.Errorf("result %d: rule %q, want %q", i, r.Rule, c.want[i])
				}
			}
		})
	}
}

func TestIsRule(t *testing.T) {
	cases := []struct {
		name, base string
		want       bool
	}{
		{"configuration", "configuration", true},
		{"configuration (binding b, param n/x)", "configuration", true},
		{"configuration #2", "configuration", true},
		{"configurations", "configuration", false},
		{"validations[0] (configuration)", "configuration", false},
		{"", "configuration", false},
	}
	for _, tc := range cases {
		if got := IsRule(tc.name, tc.base); got != tc.want {
			t.Errorf("IsRule(%q, %q) = %v, want %v", tc.name, tc.base, got, tc.want)
		}
	}
}
