package mutate

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// TestProblems lists what does not compile, by field, in spec order: what the Warning Event on the policy
// says.
func TestProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		// want are the prefixes of the problems, in order, each followed by a message naming undefined.
		want []string
	}{{
		name: "everything compiles",
		doc:  policy("p", "configmaps", "UPDATE", "", applyConfig(teamLabel)),
	}, {
		name: "mutations in spec order",
		doc: policy("p", "configmaps", "UPDATE", "",
			applyConfig(teamLabel), jsonPatch(`[JSONPatch{op: "add", path: undefinedPath}]`), applyConfig(`Object{metadata: undefinedMeta}`)),
		want: []string{"spec.mutations[1].jsonPatch.expression: ", "spec.mutations[2].applyConfiguration.expression: "},
	}, {
		name: "a matchCondition",
		doc: policy("p", "configmaps", "UPDATE", "  matchConditions:\n  - {name: broken, expression: 'undefinedCondition'}",
			applyConfig(teamLabel)),
		want: []string{"spec.matchConditions: "},
	}, {
		name: "a paramKind that does not parse",
		doc:  policy("p", "configmaps", "UPDATE", "  paramKind: {apiVersion: a/b/undefinedVersion, kind: ConfigMap}", applyConfig(teamLabel)),
		want: []string{"spec.paramKind: "},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compile(fromYAML[admissionregistrationv1.MutatingAdmissionPolicy](t, tc.doc)).Problems()
			if len(got) != len(tc.want) {
				t.Fatalf("Problems() = %q, want %d problems starting with %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) || !strings.Contains(got[i], "undefined") {
					t.Errorf("problem %d = %q, want it to start with %q and name the undefined reference", i, got[i], w)
				}
			}
		})
	}
}
