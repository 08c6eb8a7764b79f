package chart_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// wildcardRead is the read access of rbac.readAccess=wildcard, as README documents it.
var wildcardRead = []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}}

// grants reports whether rules allow verb on resource of group, as the API server's RBAC authorizer
// matches a rule: each of group, resource and verb listed or "*".
func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	has := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return has(r.APIGroups, group) && has(r.Resources, resource) && has(r.Verbs, verb)
	})
}

// builtinResources returns, from the discovery snapshot of kube-apiserver's built-in APIs that internal/views
// embeds, each resource (not subresource) that can be listed and watched, as "group/resource".
func builtinResources(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "internal", "views", "builtin_discovery.json"))
	if err != nil {
		t.Fatal(err)
	}
	var snapshot struct {
		Resources []metav1.APIResourceList `json:"resources"`
	}
	if err := json.Unmarshal(data, &snapshot); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, list := range snapshot.Resources {
		group, _, found := strings.Cut(list.GroupVersion, "/")
		if !found {
			group = "" // "v1": the core group
		}
		for _, r := range list.APIResources {
			if !strings.Contains(r.Name, "/") && slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") {
				out = append(out, group+"/"+r.Name)
			}
		}
	}
	if len(out) < 50 {
		t.Fatalf("only %d listable built-in resources in the discovery snapshot: %v", len(out), out)
	}
	return out
}

// TestReadAccess checks what each rbac.readAccess lets celaudit read: the wildcard everything; the
// restricted form every built-in resource but Secrets (Secrets with audit.secrets), plus its extra rules; and
// both bind the aggregated reader ClusterRole.
func TestReadAccess(t *testing.T) {
	t.Parallel()
	extra := []string{"--set", "rbac.restricted.extraRules[0].apiGroups[0]=example.com,rbac.restricted.extraRules[0].resources[0]=widgets",
		"--set", "rbac.restricted.extraRules[0].verbs={get,list,watch}"}
	for _, tc := range []struct {
		name                string
		args                []string
		restricted          bool
		secrets, exampleCom bool
	}{
		{name: "default", secrets: true, exampleCom: true},
		{name: "wildcard, extra rules ignored", args: append([]string{"--set", "rbac.readAccess=wildcard"}, extra...), secrets: true, exampleCom: true},
		{name: "restricted", args: []string{"--set", "rbac.readAccess=restricted"}, restricted: true},
		{name: "restricted, audit.secrets", args: []string{"--set", "rbac.readAccess=restricted,audit.secrets=true"}, restricted: true, secrets: true},
		{name: "restricted, extra rules", args: append([]string{"--set", "rbac.readAccess=restricted"}, extra...), restricted: true, exampleCom: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.args...)
			rules := objs.rules(t, "ClusterRole", "celaudit-resource-reader")
			checkBinding(t, objs, "ClusterRoleBinding", "celaudit-resource-reader-rolebinding", "celaudit-resource-reader")
			if !tc.restricted && !reflect.DeepEqual(rules, wildcardRead) {
				t.Errorf("resource-reader rules %v, want %v", rules, wildcardRead)
			}
			if tc.restricted {
				for _, r := range rules {
					if slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*") && !slices.Contains(r.APIGroups, "example.com") {
						t.Errorf("restricted read access has a wildcard rule %v", r)
					}
				}
				for _, gr := range builtinResources(t) {
					group, resource, _ := strings.Cut(gr, "/")
					for _, verb := range []string{"get", "list", "watch"} {
						if gr != "/secrets" && !grants(rules, group, resource, verb) {
							t.Errorf("restricted read access does not allow %s on built-in %s", verb, gr)
						}
					}
				}
			}
			for _, verb := range []string{"get", "list", "watch"} {
				if got := grants(rules, "", "secrets", verb); got != tc.secrets {
					t.Errorf("%s on Secrets allowed: %v, want %v", verb, got, tc.secrets)
				}
				if got := grants(rules, "example.com", "widgets", verb); got != tc.exampleCom {
					t.Errorf("%s on example.com/widgets allowed: %v, want %v", verb, got, tc.exampleCom)
				}
			}
			for _, r := range rules {
				if slices.ContainsFunc(r.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" }) {
					t.Errorf("read access rule %v allows more than reading", r)
				}
			}

			reader := convert[rbacv1.ClusterRole](t, objs.mustFind(t, "ClusterRole", "celaudit-reader"))
			wantAggregation := &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{
				MatchLabels: map[string]string{"celaudit.io/aggregate-to-reader": "true"},
			}}}
			if !reflect.DeepEqual(reader.AggregationRule, wantAggregation) || len(reader.Rules) != 0 {
				t.Errorf("reader ClusterRole: aggregationRule %v, rules %v; want %v and no rules of its own", reader.AggregationRule, reader.Rules, wantAggregation)
			}
			checkBinding(t, objs, "ClusterRoleBinding", "celaudit-reader-rolebinding", "celaudit-reader")
		})
	}
}

// TestManagerRoleReadsNoAuditedKinds checks that the generated manager ClusterRole grants no wildcard: what
// celaudit reads to audit is the install's choice, in the resource-reader ClusterRole.
func TestManagerRoleReadsNoAuditedKinds(t *testing.T) {
	t.Parallel()
	rules := render(t).rules(t, "ClusterRole", "celaudit-manager-role")
	for _, r := range rules {
		if slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*") {
			t.Errorf("the manager ClusterRole has the wildcard rule %v", r)
		}
	}
	if grants(rules, "", "secrets", "list") || grants(rules, "", "configmaps", "list") {
		t.Errorf("the manager ClusterRole lets celaudit list Secrets or ConfigMaps: %v", rules)
	}
}
