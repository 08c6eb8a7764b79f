package audit

import (
	"strconv"
	"strings"
)

// Rule names of results that no single rule of a policy produced. Every result has a rule name: report
// readers such as Policy Reporter key results by (policy, rule, resource, status, severity, category,
// source), and show a blank rule as a missing one.
const (
	// RuleRead names the results about a resource as a whole: the error of one that cannot be read, the skip
	// of one that is never read (Secrets, unless celaudit is asked to audit them).
	RuleRead = "read"
	// RuleInternal names the error result of a policy that panicked evaluating an object.
	RuleInternal = "internal"
	// RuleConfiguration names a configuration error of a ValidatingAdmissionPolicy (its paramKind, its
	// matchConstraints) or of a binding (a param not found): under failurePolicy Fail the API server denies
	// every request the policy matches, whatever the binding's validationActions.
	RuleConfiguration = "configuration"
)

// RuleMatchConditions names the results of a ValidatingAdmissionPolicy's matchConditions: their errors, and
// the skips of the objects they exclude or cannot decide on.
const RuleMatchConditions = "matchConditions"

// IsRule reports whether the published rule name name is the rule base: base itself, qualified (see RuleName)
// or numbered (see DistinctRules).
func IsRule(name, base string) bool {
	rest, ok := strings.CutPrefix(name, base)
	return ok && (rest == "" || strings.HasPrefix(rest, " (") || strings.HasPrefix(rest, " #"))
}

// RuleName returns the name a result is published under: base, the rule of the policy, followed by the
// qualifiers that tell apart the results base can give on one object, in parentheses and in order, e.g.
// "validations[0] (binding limits, param default/small)". Empty qualifiers are left out.
//
// Results of one policy on one object must have distinct rule names where their verdicts are equal: readers
// such as Policy Reporter count results by (policy, rule, object, verdict) and merge those that share it.
func RuleName(base string, qualifiers ...string) string {
	var b strings.Builder
	b.WriteString(base)
	n := 0
	for _, q := range qualifiers {
		if q == "" {
			continue
		}
		if n == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(q)
		n++
	}
	if n > 0 {
		b.WriteString(")")
	}
	return b.String()
}

// DistinctRules numbers the results that would still share a rule name and verdict on one object after
// RuleName's qualifiers (two errors of one type on one field, say): the second is named "<rule> #2", the
// third "<rule> #3", in the order of results, which policies keep deterministic. The first keeps its name,
// so a result only changes name when a sibling of it sorts before it. results is modified in place.
func DistinctRules(results []Result) {
	type key struct {
		policy, rule string
		verdict      Verdict
		resource     ObjectRef
	}
	keyOf := func(r *Result) key {
		return key{policy: r.Policy, rule: r.Rule, verdict: r.Verdict, resource: r.Resource}
	}
	// Objects have a few results, which rarely collide: look for a collision before allocating anything.
	collide := false
	for i := 1; i < len(results) && !collide; i++ {
		for j := range i {
			if keyOf(&results[i]) == keyOf(&results[j]) {
				collide = true
				break
			}
		}
	}
	if !collide {
		return
	}
	seen := make(map[key]int, len(results))
	for i := range results {
		r := &results[i]
		k := keyOf(r)
		seen[k]++
		if n := seen[k]; n > 1 {
			r.Rule += " #" + strconv.Itoa(n)
		}
	}
}
