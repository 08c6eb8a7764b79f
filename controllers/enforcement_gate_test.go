package controllers

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/results"
)

func TestEnforcementGate(t *testing.T) {
	safe := results.Safety{Status: metav1.ConditionTrue, Reason: "NoViolations", Message: "clean"}
	violations := results.Safety{Status: metav1.ConditionFalse, Reason: "Violations", Message: "2 of 3 matched objects violate the policy"}
	skipped := results.Safety{Status: metav1.ConditionUnknown, Reason: "Skipped", Message: "3 results are skips"}
	nothing := results.Safety{Status: metav1.ConditionUnknown, Reason: "NothingJudged", Message: "the policy matched no stored object"}
	override := &v1alpha1.EnforcementOverride{Reason: "incident 42: ship it"}
	const noParam = "The binding's paramRef finds no param"
	for _, tc := range []struct {
		name string
		in   gateInputs
		// register, byOverride: the decision; why: a part of the reason, "" when there is none.
		register, byOverride bool
		why                  string
	}{
		{name: "Deny, judged and clean", in: gateInputs{enforcement: v1alpha1.Deny, audited: true, safety: safe}, register: true},
		{name: "Deny with violations", in: gateInputs{enforcement: v1alpha1.Deny, audited: true, safety: violations},
			why: "SafeToEnforce is False (Violations): 2 of 3 matched objects"},
		{name: "Deny when every result is a skip", in: gateInputs{enforcement: v1alpha1.Deny, audited: true, safety: skipped},
			why: "SafeToEnforce is Unknown (Skipped)"},
		{name: "Deny when nothing was judged", in: gateInputs{enforcement: v1alpha1.Deny, audited: true, safety: nothing},
			why: "SafeToEnforce is Unknown (NothingJudged)"},
		{name: "Deny before this process audited the generation, whatever an older answer says",
			in:  gateInputs{enforcement: v1alpha1.Deny, generation: 4, audited: false, safety: safe},
			why: "has not completed an audit of generation 4"},
		{name: "Deny with a configuration error, even clean", in: gateInputs{enforcement: v1alpha1.Deny, audited: true, safety: safe, configError: noParam},
			why: "deny every write the policy matches under failurePolicy Fail, whatever the validationActions: " + noParam},
		{name: "Deny while a sharded audit is pending, whatever an older answer says",
			in:  gateInputs{enforcement: v1alpha1.Deny, generation: 4, audited: false, pending: "members 2/3 of shard epoch 1 are behind", safety: safe},
			why: "the sharded audit of generation 4 is not complete: members 2/3 of shard epoch 1 are behind"},
		{name: "Warn while a sharded audit is pending", in: gateInputs{enforcement: v1alpha1.Warn, generation: 4, pending: "members 2/3 are behind"},
			why: "the sharded audit of generation 4 is not complete"},
		{name: "Warn with violations", in: gateInputs{enforcement: v1alpha1.Warn, audited: true, safety: violations}, register: true},
		{name: "Warn with nothing judged", in: gateInputs{enforcement: v1alpha1.Warn, audited: true, safety: nothing}, register: true},
		{name: "Warn waits for the audit", in: gateInputs{enforcement: v1alpha1.Warn, generation: 2, safety: violations},
			why: "generation 2"},
		{name: "Warn with a configuration error", in: gateInputs{enforcement: v1alpha1.Warn, audited: true, safety: violations, configError: noParam},
			why: noParam},
		{name: "Deny with violations, overridden", in: gateInputs{enforcement: v1alpha1.Deny, audited: true, safety: violations, override: override},
			register: true, byOverride: true, why: "SafeToEnforce is False"},
		{name: "Warn with a configuration error, overridden", in: gateInputs{enforcement: v1alpha1.Warn, safety: violations, configError: noParam, override: override},
			register: true, byOverride: true, why: noParam},
		{name: "Deny not yet audited, overridden", in: gateInputs{enforcement: v1alpha1.Deny, generation: 1, override: override},
			register: true, byOverride: true, why: "generation 1"},
		{name: "an override of a safe policy overrides nothing", in: gateInputs{enforcement: v1alpha1.Deny, audited: true, safety: safe, override: override},
			register: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := enforcementGate(tc.in)
			if d.register != tc.register || d.byOverride != tc.byOverride {
				t.Errorf("register %v, by override %v; want %v, %v (%s)", d.register, d.byOverride, tc.register, tc.byOverride, d.why)
			}
			if (tc.why == "") != (d.why == "") || !strings.Contains(d.why, tc.why) {
				t.Errorf("why %q, want one containing %q", d.why, tc.why)
			}
		})
	}
}

func TestConfigurationError(t *testing.T) {
	fail, ignore := ptr.To(admissionregistrationv1.Fail), ptr.To(admissionregistrationv1.Ignore)
	for _, tc := range []struct {
		name      string
		fp        *admissionregistrationv1.FailurePolicyType
		paramNote string
		errors    int
		want      string
	}{
		{name: "none", fp: nil},
		{name: "a missing param, default failurePolicy", fp: nil, paramNote: "no param", want: "no param"},
		{name: "a missing param, Fail", fp: fail, paramNote: "no param", errors: 3, want: "no param"},
		{name: "configuration error results", fp: fail, errors: 3, want: "3 objects get a configuration error result"},
		{name: "Ignore denies nothing for them", fp: ignore, paramNote: "no param", errors: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := configurationError(tc.fp, tc.paramNote, tc.errors)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("configurationError = %q, want %q", got, tc.want)
			}
		})
	}
}
