package crdrules

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/celaudit/celaudit/internal/audit"
)

// Details the CEL validator prints that name no rule.
const (
	budgetDetail            = "validation failed due to running out of cost budget, no further validation rules will be run"
	messageExpressionBudget = "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run"
	initErrorPrefix         = "rule compiler initialization error: "
	compileErrorPrefix      = "rule compile error: "
)

// slot is one rule at one occurrence: a field error can come from at most one rule run.
type slot struct {
	occ  int
	rule int // index in the node's rules; -1 for the node's initialization error
	// failure is true for the path a failure is reported at (the node's path plus the rule's
	// fieldPath); false for the node's own path, where compile, runtime and budget errors are reported.
	failure bool
}

// run is the rule run of a slot, whichever path it reports at.
func (s slot) run() slot { return slot{occ: s.occ, rule: s.rule} }

// match is a slot that can have produced a field error, with how sure the match is.
type match struct {
	slot    slot
	score   int
	verdict audit.Verdict
}

// confirmedBonus outweighs any score: the marked run saw this very rule report at this path.
const confirmedBonus = 10

// attribute names the rule of each CEL field error of errs, which must be in the validator's order.
//
// It walks the rule tree alongside obj as the validator did, and matches each error against what every
// rule run there can print: its path, type, value and detail. The validator reports the rules of one
// node in order and stops at the first budget error, so the rules matched at one place must come in
// order, and each rule run is used at most once. When an error could come from several rules (two
// rules with a messageExpression, or with the same message), confirm is called once: it reruns the
// rules with messages that name them (see versionPolicy.markedRun) and returns the "field\x00ruleID"
// pairs that reported, which settles the choice; without it the earlier rule is named.
func attribute(root *ruleNode, obj interface{}, errs field.ErrorList, confirm func() map[string]bool) []Finding {
	occs := collectOccurrences(root, obj)
	byField := slotsByField(occs)
	cands, ambiguous := candidates(occs, byField, errs)
	var confirmed map[string]bool
	if ambiguous && confirm != nil {
		confirmed = confirm()
	}

	used := map[slot]bool{}
	// The highest rule index that reported at each occurrence.
	lastIndex := map[int]int{}
	findings := make([]Finding, 0, len(errs))
	for i, e := range errs {
		if isBudgetError(e) {
			findings = append(findings, budgetFinding(occs, byField[e.Field], used, lastIndex, e))
			continue
		}
		best := pick(occs, cands[i], e, confirmed, func(s slot) bool {
			if used[s.run()] {
				return false
			}
			last, ok := lastIndex[s.occ]
			return !ok || s.rule > last
		})
		if best == nil {
			// The order constraint can only fail if the validator changed its walk; name the best
			// match anyway rather than none.
			best = pick(occs, cands[i], e, confirmed, func(slot) bool { return true })
		}
		if best == nil {
			findings = append(findings, unattributed(e))
			continue
		}
		used[best.slot.run()] = true
		if last, ok := lastIndex[best.slot.occ]; !ok || best.slot.rule > last {
			lastIndex[best.slot.occ] = best.slot.rule
		}
		findings = append(findings, findingFor(occs, best.slot, e, best.verdict))
	}
	return findings
}

// slotsByField lists, by the field path an error would name, what each rule run at occs can report there:
// an initialization error or a rule's error at the rule's node, a rule's failure at its fieldPath.
func slotsByField(occs []occurrence) map[string][]slot {
	byField := map[string][]slot{}
	for i, o := range occs {
		nodePath := o.path.String()
		if o.node.initErr {
			byField[nodePath] = append(byField[nodePath], slot{occ: i, rule: -1})
		}
		for j := range o.node.rules {
			r := &o.node.rules[j]
			byField[nodePath] = append(byField[nodePath], slot{occ: i, rule: j})
			if r.evaluated {
				fp := nodePath
				if r.fieldPath != "" {
					fp = o.path.Child(r.fieldPath).String()
				}
				byField[fp] = append(byField[fp], slot{occ: i, rule: j, failure: true})
			}
		}
	}
	return byField
}

// candidates returns, for each error of errs but budget errors, the rule runs that can have printed it, and
// whether some error has more than one.
func candidates(occs []occurrence, byField map[string][]slot, errs field.ErrorList) (cands [][]match, ambiguous bool) {
	cands = make([][]match, len(errs))
	for i, e := range errs {
		if isBudgetError(e) {
			continue
		}
		for _, s := range byField[e.Field] {
			if m, ok := score(occs, s, e); ok {
				cands[i] = append(cands[i], m)
			}
		}
		ambiguous = ambiguous || len(cands[i]) > 1
	}
	return cands, ambiguous
}

func isBudgetError(e *field.Error) bool {
	return e.Type == field.ErrorTypeInvalid && e.Detail == budgetDetail
}

// pick returns the best of the allowed candidates of e: confirmed by the marked run first, then the
// most specific match, then the earliest rule and occurrence.
func pick(occs []occurrence, cands []match, e *field.Error, confirmed map[string]bool, allowed func(slot) bool) *match {
	var best *match
	for _, m := range cands {
		if !allowed(m.slot) {
			continue
		}
		if m.slot.rule >= 0 && confirmed[e.Field+"\x00"+occs[m.slot.occ].node.rules[m.slot.rule].id] {
			m.score += confirmedBonus
		}
		if best == nil || m.score > best.score ||
			(m.score == best.score && (slotOrder(occs, m.slot) < slotOrder(occs, best.slot) ||
				(slotOrder(occs, m.slot) == slotOrder(occs, best.slot) && m.slot.occ < best.slot.occ))) {
			mm := m
			best = &mm
		}
	}
	return best
}

func slotOrder(occs []occurrence, s slot) int {
	if s.rule < 0 {
		return -1
	}
	return occs[s.occ].node.rules[s.rule].order
}

// score tells whether the rule run s can have printed e, and how specifically.
func score(occs []occurrence, s slot, e *field.Error) (match, bool) {
	o := occs[s.occ]
	nodeType := o.node.schema.Type
	switch {
	case s.rule < 0:
		if e.Type == field.ErrorTypeInvalid && strings.HasPrefix(e.Detail, initErrorPrefix) && e.BadValue == nodeType {
			return match{slot: s, score: 3, verdict: audit.Error}, true
		}
		return match{}, false
	case !s.failure:
		return scoreRuleError(&o.node.rules[s.rule], s, e, nodeType)
	}
	return scoreFailure(o, s, e, nodeType)
}

// scoreRuleError tells whether e is rule r's failure to compile or to evaluate at its node.
func scoreRuleError(r *ruleInfo, s slot, e *field.Error, nodeType string) (match, bool) {
	switch {
	case r.compileErr != "":
		if e.Type != field.ErrorTypeInvalid || e.BadValue != nodeType || !strings.HasPrefix(e.Detail, compileErrorPrefix) {
			return match{}, false
		}
		// Compile errors may name the generated type of self, which differs between compilations.
		sc := 2
		if stableText(e.Detail) == stableText(r.compileErr) {
			sc = 3
		}
		return match{slot: s, score: sc, verdict: audit.Error}, true
	case r.evaluated:
		if runtimeErrorOf(r, e, nodeType) {
			return match{slot: s, score: 3, verdict: audit.Error}, true
		}
	}
	return match{}, false
}

// scoreFailure tells whether e is the failure of the rule run s at o, or an error of its messageExpression,
// reported at the rule's fieldPath.
func scoreFailure(o occurrence, s slot, e *field.Error, nodeType string) (match, bool) {
	r := &o.node.rules[s.rule]
	if r.hasMessageExpression {
		quoted := fmt.Sprintf("%q", r.rule.MessageExpression)
		switch {
		case e.Type == field.ErrorTypeInvalid && e.BadValue == nodeType &&
			(e.Detail == messageExpressionBudget || e.Detail == "no further validation rules will be run due to call cost exceeds limit for messageExpression: "+quoted):
			return match{slot: s, score: 3, verdict: audit.Error}, true
		case e.Type == field.ErrorTypeInternal && e.Detail == "runtime cost could not be calculated for messageExpression: "+quoted:
			return match{slot: s, score: 3, verdict: audit.Error}, true
		}
	}
	if e.Type != r.failureType {
		return match{}, false
	}
	if e.Type == field.ErrorTypeInvalid || e.Type == field.ErrorTypeDuplicate {
		want := o.value
		if nodeType == "object" || nodeType == "array" {
			want = field.OmitValueType{}
		}
		if !reflect.DeepEqual(e.BadValue, want) {
			return match{}, false
		}
	}
	switch {
	case e.Type == field.ErrorTypeDuplicate, e.Detail == r.message:
		return match{slot: s, score: 3, verdict: audit.Fail}, true
	case r.hasMessageExpression && e.Detail != "":
		return match{slot: s, score: 2, verdict: audit.Fail}, true
	}
	return match{}, false
}

// runtimeErrorOf tells whether e is the validator's report of rule r failing to evaluate.
func runtimeErrorOf(r *ruleInfo, e *field.Error, nodeType string) bool {
	res := r.errorString
	noCost := "runtime cost could not be calculated for validation rule: " + res + ", no further validation rules will be run"
	switch e.Type {
	case field.ErrorTypeInternal:
		return e.Detail == noCost
	case field.ErrorTypeInvalid:
		if e.BadValue != nodeType {
			return false
		}
		return e.Detail == noCost ||
			strings.HasSuffix(e.Detail, "': call arguments did not match a supported operator, function or macro signature for rule: "+res) ||
			strings.HasSuffix(e.Detail, "': no further validation rules will be run due to call cost exceeds limit for rule: "+res) ||
			strings.HasSuffix(e.Detail, " evaluating rule: "+res)
	}
	return false
}

// findingFor is the finding of e, produced by the rule run s.
func findingFor(occs []occurrence, s slot, e *field.Error, verdict audit.Verdict) Finding {
	n := occs[s.occ].node
	if s.rule < 0 {
		return stable(fromFieldError(e, joinPath(n.schemaPath, "x-kubernetes-validations"), "", verdict))
	}
	r := &n.rules[s.rule]
	return stable(fromFieldError(e, r.id, r.rule.Rule, verdict))
}

// generatedTypeName matches the name the apiserver gives the type of self when it compiles a schema's
// rules: "selfType" and the nanoseconds of the clock, new at every compilation.
var generatedTypeName = regexp.MustCompile(`\bselfType[0-9]+\b`)

// stableText replaces the generated type names of a CEL message (compile errors print them) with
// "selfType", so that a message does not change each time the CRD is compiled, which would make every
// report look new.
func stableText(s string) string {
	if !strings.Contains(s, "selfType") {
		return s
	}
	return generatedTypeName.ReplaceAllString(s, "selfType")
}

func stable(f Finding) Finding {
	f.Message = stableText(f.Message)
	return f
}

// unattributed is the finding of a CEL error no rule of the schema can have printed. It cannot
// happen with the apiserver's validator; it is kept rather than dropped so nothing is lost.
func unattributed(e *field.Error) Finding {
	verdict := audit.Fail
	if e.Type == field.ErrorTypeInternal || strings.Contains(e.Detail, "no further validation rules will be run") ||
		strings.Contains(e.Detail, " evaluating rule: ") || strings.HasPrefix(e.Detail, compileErrorPrefix) ||
		strings.HasPrefix(e.Detail, initErrorPrefix) {
		verdict = audit.Error
	}
	return stable(fromFieldError(e, RuleIDValidations, "", verdict))
}

// budgetFinding attributes an error "running out of cost budget", always the validator's last error.
// The validator runs a node's rules in order and stops at the rule that ran out, so that rule comes
// after the last rule of the node that reported an error. When exactly one rule of the node is left,
// it is named; otherwise the finding names the node's rules as a whole ("<path>.x-kubernetes-validations"),
// since the rules that passed before it leave no trace.
func budgetFinding(occs []occurrence, slots []slot, used map[slot]bool, lastIndex map[int]int, e *field.Error) Finding {
	var left []slot
	for _, s := range slots {
		o := occs[s.occ]
		if s.failure || s.rule < 0 || !o.node.rules[s.rule].evaluated || used[s.run()] || e.BadValue != o.node.schema.Type {
			continue
		}
		if last, ok := lastIndex[s.occ]; ok && s.rule <= last {
			continue
		}
		left = append(left, s)
	}
	if len(left) == 0 {
		return unattributed(e)
	}
	if len(left) == 1 {
		used[left[0].run()] = true
		return findingFor(occs, left[0], e, audit.Error)
	}
	first := left[0]
	for _, s := range left[1:] {
		if slotOrder(occs, s) < slotOrder(occs, first) {
			first = s
		}
	}
	return findingFor(occs, slot{occ: first.occ, rule: -1}, e, audit.Error)
}
