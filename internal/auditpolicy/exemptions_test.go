package auditpolicy

import (
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/utils/ptr"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/vap"
)

// builtinList is the built-in exemptions with celaudit's identity unknown, written out as the README lists
// them, sorted.
func builtinList() v1alpha1.Exemptions {
	return v1alpha1.Exemptions{
		Namespaces: []string{"kube-node-lease", "kube-system"},
		Resources: []string{"/events", "audit.celaudit.io/*", "coordination.k8s.io/leases", "events.k8s.io/events",
			"openreports.io/*", "wgpolicyk8s.io/*"},
		Users:  []string{"system:apiserver", "system:kube-controller-manager", "system:kube-scheduler"},
		Groups: []string{"system:nodes", "system:serviceaccounts:kube-system"},
	}
}

func TestNewExemptions(t *testing.T) {
	const sa = "system:serviceaccount:celaudit-system:celaudit"
	for _, tc := range []struct {
		name  string
		self  Identity
		extra v1alpha1.Exemptions
		want  func(*v1alpha1.Exemptions)
		err   string
	}{
		{name: "built-in only", want: func(*v1alpha1.Exemptions) {}},
		{name: "ServiceAccount identity: its namespace and username", self: IdentityOf(sa), want: func(e *v1alpha1.Exemptions) {
			e.Namespaces = []string{"celaudit-system", "kube-node-lease", "kube-system"}
			e.Users = []string{"system:apiserver", "system:kube-controller-manager", "system:kube-scheduler", sa}
		}},
		{name: "user identity: no namespace", self: IdentityOf("alice"), want: func(e *v1alpha1.Exemptions) {
			e.Users = []string{"alice", "system:apiserver", "system:kube-controller-manager", "system:kube-scheduler"}
		}},
		{
			name: "configured ones are added, sorted and deduplicated",
			extra: v1alpha1.Exemptions{
				Namespaces: []string{"kube-system", "gitops", "argocd"},
				Resources:  []string{"apps/deployments", "/configmaps", "coordination.k8s.io/leases", "example.com/*"},
				Users:      []string{"break-glass", "system:apiserver"},
				Groups:     []string{"oncall", "system:nodes"},
			},
			want: func(e *v1alpha1.Exemptions) {
				e.Namespaces = []string{"argocd", "gitops", "kube-node-lease", "kube-system"}
				e.Resources = []string{"/configmaps", "/events", "apps/deployments", "audit.celaudit.io/*", "coordination.k8s.io/leases",
					"events.k8s.io/events", "example.com/*", "openreports.io/*", "wgpolicyk8s.io/*"}
				e.Users = []string{"break-glass", "system:apiserver", "system:kube-controller-manager", "system:kube-scheduler"}
				e.Groups = []string{"oncall", "system:nodes", "system:serviceaccounts:kube-system"}
			},
		},
		{name: "namespace not a name", extra: v1alpha1.Exemptions{Namespaces: []string{"Kube_System"}}, err: `exempt namespace "Kube_System" is not a namespace name`},
		{name: "resource without group", extra: v1alpha1.Exemptions{Resources: []string{"configmaps"}}, err: `exempt resource "configmaps": want group/resource`},
		{name: "subresource", extra: v1alpha1.Exemptions{Resources: []string{"apps/deployments/scale"}}, err: "a subresource is exempt with its resource"},
		{name: "every group", extra: v1alpha1.Exemptions{Resources: []string{"*/*"}}, err: "the group must be named"},
		{name: "no resource", extra: v1alpha1.Exemptions{Resources: []string{"apps/"}}, err: "the resource is missing"},
		{name: "group not a name", extra: v1alpha1.Exemptions{Resources: []string{"Apps!/deployments"}}, err: "the group is not an API group name"},
		{name: "resource not a name", extra: v1alpha1.Exemptions{Resources: []string{"apps/Deployments"}}, err: "the resource is not a resource name"},
		{name: "blank user", extra: v1alpha1.Exemptions{Users: []string{" "}}, err: `exempt user " " is empty`},
		{name: "empty group", extra: v1alpha1.Exemptions{Groups: []string{""}}, err: `exempt group "" is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex, err := NewExemptions(tc.self, tc.extra)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := builtinList()
			tc.want(&want)
			if got := ex.List(); !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("exemptions:\n%s", diff.Diff(want, got))
			}
		})
	}
}

// The zero value is never empty: it holds the built-in exemptions.
func TestZeroExemptions(t *testing.T) {
	if got := (Exemptions{}).List(); !equality.Semantic.DeepEqual(got, builtinList()) {
		t.Errorf("zero value:\n%s", diff.Diff(builtinList(), got))
	}
}

func TestIdentityOf(t *testing.T) {
	for _, tc := range []struct{ username, namespace string }{
		{"system:serviceaccount:celaudit-system:celaudit-controller-manager", "celaudit-system"},
		{"system:serviceaccount:broken", ""},
		{"kubernetes-admin", ""},
	} {
		if got := IdentityOf(tc.username); got != (Identity{Username: tc.username, Namespace: tc.namespace}) {
			t.Errorf("IdentityOf(%q) = %+v, want namespace %q", tc.username, got, tc.namespace)
		}
	}
}

// excluded is an excludeResourceRule as every pair carries it for an exempt resource.
func excluded(group string, resources ...string) admissionregistrationv1.NamedRuleWithOperations {
	return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{"*"},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: resources,
			Scope: ptr.To(admissionregistrationv1.AllScopes)},
	}}
}

// builtinExcludes are the excludeResourceRules of the built-in exempt resources, in their sorted order.
func builtinExcludes() []admissionregistrationv1.NamedRuleWithOperations {
	return []admissionregistrationv1.NamedRuleWithOperations{
		excluded("", "events", "events/*"),
		excluded("audit.celaudit.io", "*/*"),
		excluded("coordination.k8s.io", "leases", "leases/*"),
		excluded("events.k8s.io", "events", "events/*"),
		excluded("openreports.io", "*/*"),
		excluded("wgpolicyk8s.io", "*/*"),
	}
}

var notInBuiltinNamespaces = metav1.LabelSelectorRequirement{
	Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-node-lease", "kube-system"},
}

const builtinIdentities = `!(has(request.userInfo.username) && request.userInfo.username in ["system:apiserver", "system:kube-controller-manager", "system:kube-scheduler"]) && ` +
	`!(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in ["system:nodes", "system:serviceaccounts:kube-system"]))`

func TestExemptionsApplied(t *testing.T) {
	userRule := excluded("apps", "deployments")
	for _, tc := range []struct {
		name string
		// matchResources is the AuditPolicy's spec.matchResources.
		matchResources *admissionregistrationv1.MatchResources
		want           *admissionregistrationv1.MatchResources
	}{
		{
			name: "no matchResources",
			want: &admissionregistrationv1.MatchResources{
				NamespaceSelector:    &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{notInBuiltinNamespaces}},
				ExcludeResourceRules: builtinExcludes(),
			},
		},
		{
			name: "the AuditPolicy's selectors and rules are kept, the exemptions added after them",
			matchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{
					MatchLabels:      map[string]string{"team": "a"},
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}},
				},
				ObjectSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
				ResourceRules:        []admissionregistrationv1.NamedRuleWithOperations{excluded("", "configmaps")},
				ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{userRule},
				MatchPolicy:          ptr.To(admissionregistrationv1.Exact),
			},
			want: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{"team": "a"},
					MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "tier", Operator: metav1.LabelSelectorOpExists}, notInBuiltinNamespaces,
					},
				},
				ObjectSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
				ResourceRules:        []admissionregistrationv1.NamedRuleWithOperations{excluded("", "configmaps")},
				ExcludeResourceRules: append([]admissionregistrationv1.NamedRuleWithOperations{userRule}, builtinExcludes()...),
				MatchPolicy:          ptr.To(admissionregistrationv1.Exact),
			},
		},
		{
			name:           "an objectSelector only",
			matchResources: &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}},
			want: &admissionregistrationv1.MatchResources{
				NamespaceSelector:    &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{notInBuiltinNamespaces}},
				ObjectSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
				ExcludeResourceRules: builtinExcludes(),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			userCondition := admissionregistrationv1.MatchCondition{Name: "c", Expression: "true"}
			ap := fullPolicy(func(ap *v1alpha1.AuditPolicy) { ap.Spec.MatchResources = tc.matchResources })
			audited, registered := ToAdmission(ap, Exemptions{}), Owned(ap, Exemptions{})
			for what, a := range map[string]Admission{"audited": audited, "registered": registered} {
				if got := a.Binding.Spec.MatchResources; !equality.Semantic.DeepEqual(got, tc.want) {
					t.Errorf("%s binding matchResources:\n%s", what, diff.Diff(tc.want, got))
				}
			}
			// Only the registered policy leaves out request identities: the audit has no request user.
			if got := audited.Policy.Spec.MatchConditions; !equality.Semantic.DeepEqual(got, []admissionregistrationv1.MatchCondition{userCondition}) {
				t.Errorf("audited matchConditions = %+v, want the AuditPolicy's only", got)
			}
			wantRegistered := []admissionregistrationv1.MatchCondition{userCondition,
				{Name: "audit.celaudit.io/exempt-identities", Expression: builtinIdentities}}
			if got := registered.Policy.Spec.MatchConditions; !equality.Semantic.DeepEqual(got, wantRegistered) {
				t.Errorf("registered matchConditions:\n%s", diff.Diff(wantRegistered, got))
			}
			// The AuditPolicy itself is left as it was.
			if !equality.Semantic.DeepEqual(ap.Spec.MatchResources, tc.matchResources) || len(ap.Spec.MatchConditions) != 1 {
				t.Errorf("the AuditPolicy changed: %+v", ap.Spec)
			}
		})
	}
}

// hostileNames are users and groups whose names would end a string literal badly quoted, or read as CEL.
var hostileNames = []string{`quote"d`, `back\slash`, "new\nline", `x"] || true || ["y`, `'single'`, "tab\tand\x00nul", "ünïcode"}

// The exemption condition compiles with the API server's compiler, whatever the names; and, evaluated on a
// request, it exempts exactly the named users and groups.
func TestIdentitiesExpression(t *testing.T) {
	ex, err := NewExemptions(IdentityOf("system:serviceaccount:celaudit-system:celaudit"),
		v1alpha1.Exemptions{Users: hostileNames, Groups: hostileNames})
	if err != nil {
		t.Fatal(err)
	}
	a := Owned(fullPolicy(), ex)
	compiled := vap.CompilePolicy(a.Policy, vap.Options{})
	if problems := compiled.Problems(); len(problems) > 0 {
		t.Fatalf("the registered policy does not compile: %v", problems)
	}
	expr := a.Policy.Spec.MatchConditions[len(a.Policy.Spec.MatchConditions)-1].Expression

	env, err := cel.NewEnv(cel.Variable("request", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("compiling %s: %v", expr, iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	judged := func(userInfo map[string]any) bool {
		t.Helper()
		out, _, err := prg.Eval(map[string]any{"request": map[string]any{"userInfo": userInfo}})
		if err != nil {
			t.Fatalf("evaluating for %v: %v", userInfo, err)
		}
		return out.Value().(bool)
	}
	for _, name := range hostileNames {
		if judged(map[string]any{"username": name}) {
			t.Errorf("user %q is exempt but judged", name)
		}
		if judged(map[string]any{"username": "bob", "groups": []string{"system:authenticated", name}}) {
			t.Errorf("a member of group %q is exempt but judged", name)
		}
	}
	for _, userInfo := range []map[string]any{
		{"username": "bob", "groups": []string{"system:authenticated"}},
		{"username": `x`},
		{"username": `quote`},
		{"groups": []string{"system:serviceaccounts"}},
		{},
	} {
		if !judged(userInfo) {
			t.Errorf("%v is not exempt but is left out", userInfo)
		}
	}
	for _, userInfo := range []map[string]any{
		{"username": "system:serviceaccount:celaudit-system:celaudit", "groups": []string{"system:serviceaccounts"}},
		{"username": "system:node:n1", "groups": []string{"system:nodes", "system:authenticated"}},
		{"username": "system:kube-scheduler"},
	} {
		if judged(userInfo) {
			t.Errorf("%v is exempt but judged", userInfo)
		}
	}
}
