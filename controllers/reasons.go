package controllers

import "github.com/celaudit/celaudit/internal/results"

// The reasons of every Event celaudit records and of the conditions of its AuditPolicies, in one place, as
// cluster-api keeps its condition reasons. README.md's Events table lists each Event reason with its type, the
// kinds it is recorded on and when; TestReasonsDocumented holds the two together.

// Event reasons. Events are recorded where users look (`kubectl describe`, `kubectl events --for`) on the
// object concerned; those of warnings.go once per generation of that object.
const (
	// ReasonSafeToEnforce (Normal), ReasonNotSafeToEnforce (Warning) and ReasonSafeToEnforceUnknown (Normal)
	// tell, on a CRD, ValidatingAdmissionPolicy or AuditPolicy, its safety at the first complete audit after
	// start and at each change of it (readiness.go). Unknown: the audit cannot tell (nothing judged, skips,
	// subresources, unreadable resources); the note says which. NotSafeToEnforce is also the reason of the
	// Enforced condition of an AuditPolicy whose pair the enforcement gate refuses to register.
	ReasonSafeToEnforce        = "SafeToEnforce"
	ReasonNotSafeToEnforce     = "NotSafeToEnforce"
	ReasonSafeToEnforceUnknown = "SafeToEnforceUnknown"

	// ReasonCompileFailed (Warning): a CRD, ValidatingAdmissionPolicy, AuditPolicy or MutatingAdmissionPolicy
	// has rules or expressions that do not compile. Also the reason of an AuditPolicy's Compiled condition (False), of its Enforced
	// condition and of its SafeToEnforce condition when it does not compile.
	ReasonCompileFailed = "CompileFailed"
	// ReasonPolicyNotFound (Warning): a ValidatingAdmissionPolicyBinding names a policy that does not exist.
	ReasonPolicyNotFound = "PolicyNotFound"
	// ReasonParamsNotFound (Warning): the paramRef of a ValidatingAdmissionPolicyBinding, or of an
	// AuditPolicy, finds no param object (parameterNotFoundAction Deny), or its policy's paramKind is not served.
	ReasonParamsNotFound = "ParamsNotFound"
	// ReasonParamsNotRead (Warning): the params of a ValidatingAdmissionPolicy or an AuditPolicy are of a kind
	// celaudit does not read (Secrets, without --audit-secrets) and a binding has a paramRef, or the paramRef
	// of a binding reads params celaudit may not list and watch (its RBAC does not grant them).
	ReasonParamsNotRead = "ParamsNotRead"

	// ReasonResourceUnreadable (Warning) and ReasonResourceReadable (Normal): a resource a CRD,
	// ValidatingAdmissionPolicy or AuditPolicy covers cannot be read, and again when it can (read_errors.go).
	ReasonResourceUnreadable = "ResourceUnreadable"
	ReasonResourceReadable   = "ResourceReadable"

	// ReasonRegisteredWithOverride (Warning): an AuditPolicy's pair is registered although the enforcement
	// gate would refuse it, because spec.enforcementOverride says so; also the reason of its Enforced
	// condition then.
	ReasonRegisteredWithOverride = "RegisteredWithOverride"
	// ReasonPromoted (Normal) and ReasonPromotionFailed (Warning): an AuditPolicy's enforcement was moved
	// forward by its promotion, or the write that moves it failed.
	ReasonPromoted        = "Promoted"
	ReasonPromotionFailed = "PromotionFailed"

	// ReasonDrifted (Warning) and ReasonInShape (Normal): on a MutatingAdmissionPolicy, some stored objects
	// would be changed by it on their next write, where at the audit before none would (or at the first
	// complete audit after start), and again when none would any more (readiness.go).
	ReasonDrifted = "Drifted"
	ReasonInShape = "InShape"

	// ReasonReportNameTaken (Warning): a report celaudit does not own (a PolicyReport, ClusterPolicyReport,
	// Report or ClusterReport) holds the name of one of celaudit's, which it then writes under another name.
	ReasonReportNameTaken = "ReportNameTaken"
)

// Reasons of the conditions of an AuditPolicy's status only (auditpolicy_status.go), besides those above.
// The SafeToEnforce condition's reasons are results.SafetyOf's: NoViolations, Violations and AuditPending.
const (
	// ReasonCompiled: the Compiled condition is True.
	ReasonCompiled = "Compiled"
	// ReasonAuditOnly, ReasonManagementOff, ReasonRegistered, ReasonRegisterFailed and ReasonNameTaken are
	// reasons of the Enforced condition: enforcement is Audit; celaudit runs without
	// --manage-admission-policies; the pair is registered; the API server refused it; an object not
	// celaudit's holds its name.
	ReasonAuditOnly      = "AuditOnly"
	ReasonManagementOff  = "ManagementDisabled"
	ReasonRegistered     = "Registered"
	ReasonRegisterFailed = "RegisterFailed"
	ReasonNameTaken      = "NameTaken"
	// ReasonAuditPending: the SafeToEnforce condition waits for a complete audit of the policy as it is now.
	ReasonAuditPending = results.SafetyAuditPending
)
