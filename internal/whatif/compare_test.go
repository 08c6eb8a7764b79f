package whatif

import (
	"slices"
	"testing"

	"github.com/celaudit/celaudit/internal/audit"
)

// resultOption changes a fixture result.
type resultOption func(*audit.Result)

func withProp(k, v string) resultOption {
	return func(r *audit.Result) { r.Properties[k] = v }
}

func withRule(rule string) resultOption { return func(r *audit.Result) { r.Rule = rule } }

// result returns a result of a policy on one object, with verdict and message.
func result(verdict audit.Verdict, message string, opts ...resultOption) audit.Result {
	r := audit.Result{Policy: "p", Verdict: verdict, Message: message, Properties: map[string]string{},
		Resource: audit.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm", UID: "uid"}}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name            string
		today, proposed []audit.Result
		want            []string
		wantFixed       []string // messages
	}{
		{
			name:     "new policy: a failure is new",
			proposed: []audit.Result{result(audit.Fail, "too big")},
			want:     []string{WhatifNew},
		},
		{
			name:     "same failure through another rule index: unchanged",
			today:    []audit.Result{result(audit.Fail, "too big", withRule("validations[1]"))},
			proposed: []audit.Result{result(audit.Fail, "too big", withRule("validations[0]"))},
			want:     []string{WhatifUnchanged},
		},
		{
			// Nothing is fixed: the object is rejected instead of warned about.
			name:     "a warning becomes a denial: a new fail, nothing fixed",
			today:    []audit.Result{result(audit.Warn, "no owner", withProp(audit.PropBinding, "b"))},
			proposed: []audit.Result{result(audit.Fail, "no owner", withProp(audit.PropBinding, "b"))},
			want:     []string{WhatifNew},
		},
		{
			// The rejection is gone: fixed, and the warning is new.
			name:      "a denial becomes a warning: a new warn, a fixed fail",
			today:     []audit.Result{result(audit.Fail, "no owner", withProp(audit.PropBinding, "b"))},
			proposed:  []audit.Result{result(audit.Warn, "no owner", withProp(audit.PropBinding, "b"))},
			want:      []string{WhatifNew},
			wantFixed: []string{"no owner"},
		},
		{
			name:      "a warning becomes a denial through another binding: fixed",
			today:     []audit.Result{result(audit.Warn, "no owner", withProp(audit.PropBinding, "a"))},
			proposed:  []audit.Result{result(audit.Fail, "no owner", withProp(audit.PropBinding, "b"))},
			want:      []string{WhatifNew},
			wantFixed: []string{"no owner"},
		},
		{
			name:      "another binding: new",
			today:     []audit.Result{result(audit.Fail, "too big", withProp(audit.PropBinding, "a"))},
			proposed:  []audit.Result{result(audit.Fail, "too big", withProp(audit.PropBinding, "b"))},
			want:      []string{WhatifNew},
			wantFixed: []string{"too big"},
		},
		{
			name:      "passes now: the pass is fixed",
			today:     []audit.Result{result(audit.Fail, "too big"), result(audit.Error, "no params")},
			proposed:  []audit.Result{result(audit.Pass, "")},
			want:      []string{WhatifFixed},
			wantFixed: []string{"too big", "no params"},
		},
		{
			name:     "passes both ways: unchanged",
			today:    []audit.Result{result(audit.Pass, ""), result(audit.Skip, "transition rule")},
			proposed: []audit.Result{result(audit.Pass, ""), result(audit.Skip, "transition rule")},
			want:     []string{WhatifUnchanged, WhatifUnchanged},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, fixed := Compare(tc.today, tc.proposed)
			if !slices.Equal(got, tc.want) {
				t.Errorf("whatif %q, want %q", got, tc.want)
			}
			var fixedMessages []string
			for _, f := range fixed {
				fixedMessages = append(fixedMessages, f.Message)
			}
			if !slices.Equal(fixedMessages, tc.wantFixed) {
				t.Errorf("fixed %q, want %q", fixedMessages, tc.wantFixed)
			}
		})
	}
}

func TestRejects(t *testing.T) {
	errorWith := func(message string, opts ...resultOption) audit.Result {
		return result(audit.Error, message, append([]resultOption{withProp(audit.PropFailurePolicy, "Fail"), withProp(audit.PropBinding, "b")}, opts...)...)
	}
	for _, tc := range []struct {
		name string
		r    audit.Result
		want bool
	}{
		{"fail", result(audit.Fail, "x"), true},
		{"warn", result(audit.Warn, "x"), false},
		{"skip", result(audit.Skip, "x"), false},
		{"CRD rule that could not be evaluated", result(audit.Error, "x", withProp(audit.PropCRDVersion, "v1")), true},
		{"error of a Warn binding", errorWith("x", withProp(audit.PropValidationActions, "Warn,Audit")), false},
		{"error of a Deny binding", errorWith("x", withProp(audit.PropValidationActions, "Deny")), true},
		{"configuration error of a Warn binding", errorWith("failed to configure binding: no params found", withProp(audit.PropValidationActions, "Warn")), true},
		{"auditAnnotation error of an Audit binding", errorWith("x", withRule("auditAnnotations[0]"), withProp(audit.PropValidationActions, "Audit")), true},
		{"error of the policy as a whole", result(audit.Error, "x", withProp(audit.PropFailurePolicy, "Fail")), true},
		{"error under failurePolicy Ignore", result(audit.Error, "x", withProp(audit.PropFailurePolicy, "Ignore"), withProp(audit.PropValidationActions, "Deny")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Rejects(tc.r); got != tc.want {
				t.Errorf("Rejects = %v, want %v", got, tc.want)
			}
		})
	}
}
