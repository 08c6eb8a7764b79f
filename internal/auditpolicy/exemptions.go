package auditpolicy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
)

// MatchConditionExemptIdentities names the matchCondition of every registered policy that leaves out the
// requests of the exempt users and groups. The API server allows 64 matchConditions; an AuditPolicy may hold
// 63 so that this one always fits.
const MatchConditionExemptIdentities = "audit.celaudit.io/exempt-identities"

// Identity is who celaudit is to the API server: the username its requests carry and, when it runs as a
// ServiceAccount, that ServiceAccount's namespace (the namespace it is installed in).
type Identity struct {
	Username  string
	Namespace string
}

// IdentityOf returns the identity of the user named username: a ServiceAccount's username
// (system:serviceaccount:NAMESPACE:NAME) names its namespace too; any other leaves the namespace unknown.
func IdentityOf(username string) Identity {
	id := Identity{Username: username}
	if ns, _, err := serviceaccount.SplitUsername(username); err == nil {
		id.Namespace = ns
	}
	return id
}

// builtin returns what no pair celaudit registers may ever deny, for celaudit running as self (either part
// may be unknown): the namespaces and Leases the control plane and the nodes keep themselves alive with,
// Events, celaudit's own API group and the reports it writes, and the requests of the control plane, the
// nodes, kube-system's ServiceAccounts and celaudit itself. Gatekeeper exempts its own namespace and Kyverno
// filters kube-system and its own resources for the same reason: a policy that can deny these can stop the
// cluster, or stop the tool that could take the policy back.
func builtin(self Identity) v1alpha1.Exemptions {
	e := v1alpha1.Exemptions{
		Namespaces: []string{metav1.NamespaceSystem, corev1.NamespaceNodeLease},
		Resources: []string{
			coordinationv1.GroupName + "/leases",
			corev1.GroupName + "/events",
			eventsv1.GroupName + "/events",
			v1alpha1.GroupVersion.Group + "/*",
			v1alpha2.GroupVersion.Group + "/*",
			openreportsv1alpha1.GroupName + "/*",
		},
		Users:  []string{user.APIServerUser, user.KubeControllerManager, user.KubeScheduler},
		Groups: []string{user.NodesGroup, serviceaccount.MakeNamespaceGroupName(metav1.NamespaceSystem)},
	}
	if self.Namespace != "" {
		e.Namespaces = append(e.Namespaces, self.Namespace)
	}
	if self.Username != "" {
		e.Users = append(e.Users, self.Username)
	}
	return e
}

// Exemptions are what every pair celaudit registers leaves out, whatever the AuditPolicy says: the built-in
// exemptions and those configured on top of them. They only ever add to the built-in ones, so that no
// configuration can empty them by accident.
//
// The zero value holds the built-in exemptions with celaudit's own namespace and identity unknown: what a
// pair exported from a file, without a cluster, carries.
type Exemptions struct {
	// list is sorted, deduplicated and holds the built-in exemptions; empty only in the zero value.
	list v1alpha1.Exemptions
}

// NewExemptions returns the built-in exemptions for celaudit running as self, with extra added. An entry of
// extra that is not a namespace name, a group/resource, a username or a group name is an error.
func NewExemptions(self Identity, extra v1alpha1.Exemptions) (Exemptions, error) {
	for _, ns := range extra.Namespaces {
		if err := CheckNamespace(ns); err != nil {
			return Exemptions{}, err
		}
	}
	for _, r := range extra.Resources {
		if _, err := ParseResource(r); err != nil {
			return Exemptions{}, err
		}
	}
	for _, u := range extra.Users {
		if err := CheckIdentity("user", u); err != nil {
			return Exemptions{}, err
		}
	}
	for _, g := range extra.Groups {
		if err := CheckIdentity("group", g); err != nil {
			return Exemptions{}, err
		}
	}
	b := builtin(self)
	return Exemptions{list: v1alpha1.Exemptions{
		Namespaces: union(b.Namespaces, extra.Namespaces),
		Resources:  union(b.Resources, extra.Resources),
		Users:      union(b.Users, extra.Users),
		Groups:     union(b.Groups, extra.Groups),
	}}, nil
}

// List returns the exemptions, sorted, as status.exemptions shows them. Nothing is shared with e.
func (e Exemptions) List() v1alpha1.Exemptions {
	if len(e.list.Namespaces) == 0 {
		zero, _ := NewExemptions(Identity{}, v1alpha1.Exemptions{})
		return zero.list
	}
	return *e.list.DeepCopy()
}

// CheckNamespace returns an error unless ns can name a namespace.
func CheckNamespace(ns string) error {
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return fmt.Errorf("exempt namespace %q is not a namespace name: %s", ns, strings.Join(msgs, "; "))
	}
	return nil
}

// ParseResource returns the group and resource of an exempt resource written group/resource: "" is the
// core group ("/events"), and "*" as the resource stands for every resource of the group. Subresources are
// exempt with their resource and cannot be named alone; a group cannot be "*" (that would exempt
// everything, and enforce nothing).
func ParseResource(s string) (schema.GroupResource, error) {
	group, resource, ok := strings.Cut(s, "/")
	invalid := func(why string) (schema.GroupResource, error) {
		return schema.GroupResource{}, fmt.Errorf("exempt resource %q: %s", s, why)
	}
	switch {
	case !ok:
		return invalid(`want group/resource, "/resource" for the core group`)
	case strings.Contains(resource, "/"):
		return invalid("a subresource is exempt with its resource; name the resource")
	case group == "*":
		return invalid("the group must be named: every group would exempt everything")
	case group != "" && len(validation.IsDNS1123Subdomain(group)) > 0:
		return invalid("the group is not an API group name: " + strings.Join(validation.IsDNS1123Subdomain(group), "; "))
	case resource == "":
		return invalid(`the resource is missing ("*" stands for every resource of the group)`)
	case resource != "*" && len(validation.IsDNS1123Label(resource)) > 0:
		return invalid("the resource is not a resource name: " + strings.Join(validation.IsDNS1123Label(resource), "; "))
	}
	return schema.GroupResource{Group: group, Resource: resource}, nil
}

// CheckIdentity returns an error when the user or group name is empty or blank.
func CheckIdentity(kind, name string) error {
	if strings.TrimSpace(name) == "" {
		return fmt.Errorf("exempt %s %q is empty", kind, name)
	}
	return nil
}

// apply makes the pair a leave out the exemptions. The binding's matchResources gets a namespaceSelector
// requirement excluding the exempt namespaces (ANDed with the AuditPolicy's own selector: the API server then
// also leaves out the Namespace objects themselves) and an excludeResourceRule for each exempt resource,
// after the AuditPolicy's own. Only a registered pair (registered) gets the matchCondition that leaves out
// the exempt users and groups: celaudit's audit has no request user, and that condition would make every
// audited object a skip.
func (e Exemptions) apply(a Admission, registered bool) {
	list := e.List()
	m := a.Binding.Spec.MatchResources
	if m == nil {
		m = &admissionregistrationv1.MatchResources{}
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	m.NamespaceSelector.MatchExpressions = append(m.NamespaceSelector.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: list.Namespaces,
	})
	for _, r := range list.Resources {
		gr, err := ParseResource(r)
		if err != nil {
			continue // NewExemptions accepts only what parses
		}
		m.ExcludeResourceRules = append(m.ExcludeResourceRules, excludeRule(gr))
	}
	a.Binding.Spec.MatchResources = m
	if registered {
		a.Policy.Spec.MatchConditions = append(a.Policy.Spec.MatchConditions, admissionregistrationv1.MatchCondition{
			Name: MatchConditionExemptIdentities, Expression: identitiesExpression(list.Users, list.Groups),
		})
	}
}

// excludeRule covers gr and its subresources, in every version, for every operation and scope. The API
// server refuses "*" next to "*/*", which covers every resource with and without a subresource.
func excludeRule(gr schema.GroupResource) admissionregistrationv1.NamedRuleWithOperations {
	resources := []string{gr.Resource, gr.Resource + "/*"}
	if gr.Resource == "*" {
		resources = []string{"*/*"}
	}
	return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{gr.Group}, APIVersions: []string{"*"}, Resources: resources,
			Scope: ptr.To(admissionregistrationv1.AllScopes),
		},
	}}
}

// identitiesExpression is a CEL expression that is false for a request of one of users or of a member of one
// of groups. A request without a username or groups (the API server leaves empty fields out of request)
// is not exempt, and does not make the condition fail: under failurePolicy Fail an error would deny it.
func identitiesExpression(users, groups []string) string {
	return fmt.Sprintf("!(has(request.userInfo.username) && request.userInfo.username in %s) && "+
		"!(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in %s))", celStrings(users), celStrings(groups))
}

// celStrings returns a CEL list literal of ss. strconv.Quote writes a double-quoted string whose escapes
// (\", \\, \n, \xHH, \uHHHH, ...) are CEL's too, so no name can end the literal or inject an expression.
func celStrings(ss []string) string {
	quoted := make([]string, len(ss))
	for i, s := range ss {
		quoted[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// union returns the sorted, deduplicated entries of a and b.
func union(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}
