// Package auditpolicy converts an AuditPolicy (audit.celaudit.io/v1alpha1) to the ValidatingAdmissionPolicy
// and binding it stands for, and back.
//
// An AuditPolicy is evaluated as that pair, by the same code that evaluates the cluster's own policies, so
// that its verdicts and messages are those the API server gives once the pair is registered. In Audit the
// pair is only evaluated by celaudit (its binding's validationActions are [Audit]); in Warn and Deny celaudit
// registers it with the API server, owned by the AuditPolicy. The conversion is pure: the controller decides
// when to write.
//
// Every pair leaves out the Exemptions: what keeps the cluster and celaudit running (kube-system,
// kube-node-lease and celaudit's namespace, Leases, Events, celaudit's API group and reports, the control
// plane's, the nodes' and celaudit's own requests) can never be denied by an AuditPolicy, whatever it says.
package auditpolicy
