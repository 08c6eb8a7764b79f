package audit

import "strings"

// PolicySource names the kind of object a policy is compiled from.
type PolicySource string

// The sources of policies celaudit audits.
const (
	// SourceCRD is a CustomResourceDefinition's validation: its OpenAPI schema and x-kubernetes-validations.
	SourceCRD PolicySource = "crd"
	// SourceVAP is a ValidatingAdmissionPolicy with its bindings.
	SourceVAP PolicySource = "vap"
	// SourceAuditPolicy is one of celaudit's own AuditPolicies (audit.celaudit.io).
	SourceAuditPolicy PolicySource = "auditpolicy"
	// SourceMAP is a MutatingAdmissionPolicy with its bindings: its results say whether a stored object is
	// as the policy would leave it on its next write (see package mutate).
	SourceMAP PolicySource = "map"
	// SourceAPIServer is the API server's own limits on a request (its body size, a ConfigMap's data), which
	// refuse an object before any validation or policy judges it. Only kubectl celaudit check judges them.
	SourceAPIServer PolicySource = "apiserver"
)

// Kind returns the kind of the object the policy comes from, as a result's property PropPolicyKind names it:
// CustomResourceDefinition, ValidatingAdmissionPolicy, AuditPolicy or MutatingAdmissionPolicy; "" for an
// unknown source.
func (s PolicySource) Kind() string {
	switch s {
	case SourceCRD:
		return "CustomResourceDefinition"
	case SourceVAP:
		return "ValidatingAdmissionPolicy"
	case SourceAuditPolicy:
		return "AuditPolicy"
	case SourceMAP:
		return "MutatingAdmissionPolicy"
	}
	return ""
}

// SourceOfKind returns the source whose Kind is kind, and false for any other kind.
func SourceOfKind(kind string) (PolicySource, bool) {
	for _, s := range []PolicySource{SourceCRD, SourceVAP, SourceAuditPolicy, SourceMAP} {
		if s.Kind() == kind {
			return s, true
		}
	}
	return "", false
}

// PolicyKey identifies a policy among every source, from compilation to report: a CRD and a
// ValidatingAdmissionPolicy may share a name, so the name alone does not. Results carry the name; the
// key is what the scan, the result store and the reconcilers index by.
type PolicyKey struct {
	Source PolicySource
	Name   string
}

// CRDKey is the key of the policy of the CRD named name.
func CRDKey(name string) PolicyKey { return PolicyKey{Source: SourceCRD, Name: name} }

// VAPKey is the key of the policy of the ValidatingAdmissionPolicy named name.
func VAPKey(name string) PolicyKey { return PolicyKey{Source: SourceVAP, Name: name} }

// AuditPolicyKey is the key of the policy of the AuditPolicy named name.
func AuditPolicyKey(name string) PolicyKey { return PolicyKey{Source: SourceAuditPolicy, Name: name} }

// MAPKey is the key of the policy of the MutatingAdmissionPolicy named name.
func MAPKey(name string) PolicyKey { return PolicyKey{Source: SourceMAP, Name: name} }

// String returns the key as source/name, for logs and sorting.
func (k PolicyKey) String() string { return string(k.Source) + "/" + k.Name }

// Compare orders keys by source, then name, as slices.SortFunc wants: negative when k comes first.
func (k PolicyKey) Compare(o PolicyKey) int {
	if c := strings.Compare(string(k.Source), string(o.Source)); c != 0 {
		return c
	}
	return strings.Compare(k.Name, o.Name)
}

// ComparePolicies orders policies by key.
func ComparePolicies(a, b Policy) int { return a.Key().Compare(b.Key()) }
