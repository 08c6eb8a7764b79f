package controllers

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/results"
)

// gateInputs are what decides whether an AuditPolicy's pair may be registered with the API server for Warn or
// Deny. Every path to an enforcing pair goes through enforcementGate: a hand-set enforcement, a promotion, a
// spec edit and a restart alike.
type gateInputs struct {
	// enforcement is Warn or Deny.
	enforcement v1alpha1.Enforcement
	generation  int64
	override    *v1alpha1.EnforcementOverride
	// audited says that this process completed an audit of the current generation after registering it with
	// the scanner: a status written before (by another process, of another generation) decides nothing.
	audited bool
	// pending says why a sharded audit is not complete ("" when it is, or is not sharded).
	pending string
	// safety is that audit's answer; meaningful only when audited.
	safety results.Safety
	// configError says why the API server would deny every matched write whatever the binding's
	// validationActions (a configuration error under failurePolicy Fail); "" when none is known.
	configError string
}

// gateDecision is what enforcementGate decides.
type gateDecision struct {
	// register says that the pair may be registered (created or updated) with the wanted enforcement.
	register bool
	// byOverride says that only spec.enforcementOverride lets it be registered.
	byOverride bool
	// why says what is not safe: why it is refused, or what the override overrides. "" when safe.
	why string
}

// enforcementGate decides whether the pair may be registered. Deny needs SafeToEnforce True from this
// process's complete audit of the current generation. Warn is allowed with violations (warning about them is
// its purpose) once that audit is complete, but neither is while a configuration error would make the API
// server deny every matched write under failurePolicy Fail (the validating dispatcher's addConfigError ignores
// the validationActions). spec.enforcementOverride registers the pair anyway.
func enforcementGate(in gateInputs) gateDecision {
	why := ""
	switch {
	case in.configError != "":
		why = "a configuration error makes the API server deny every write the policy matches under failurePolicy Fail, whatever the validationActions: " + in.configError
	case !in.audited && in.pending != "":
		why = fmt.Sprintf("the sharded audit of generation %d is not complete: %s", in.generation, in.pending)
	case !in.audited:
		why = fmt.Sprintf("celaudit has not completed an audit of generation %d since it started or the generation was registered", in.generation)
	case in.enforcement == v1alpha1.Deny && !in.safety.Safe():
		why = fmt.Sprintf("SafeToEnforce is %s (%s): %s", in.safety.Status, in.safety.Reason, in.safety.Message)
	}
	switch {
	case why == "":
		return gateDecision{register: true}
	case in.override != nil:
		return gateDecision{register: true, byOverride: true, why: why}
	}
	return gateDecision{why: why}
}

// failsClosed reports whether a policy with failurePolicy fp turns configuration errors into denials: Fail,
// the default.
func failsClosed(fp *admissionregistrationv1.FailurePolicyType) bool {
	return fp == nil || *fp == admissionregistrationv1.Fail
}

// configurationError says why the API server would deny every write an AuditPolicy matches under failurePolicy
// Fail: its paramRef finds no param (paramNote, what paramProblem says), or the audit found configuration error
// results (configErrors of them). "" when neither, or when the policy's failurePolicy is Ignore.
func configurationError(fp *admissionregistrationv1.FailurePolicyType, paramNote string, configErrors int) string {
	switch {
	case !failsClosed(fp):
		return ""
	case paramNote != "":
		return paramNote
	case configErrors > 0:
		return fmt.Sprintf("%d objects get a configuration error result (see the policy's error results)", configErrors)
	}
	return ""
}
