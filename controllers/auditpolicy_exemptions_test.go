package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
)

// The status shows the exemptions in force, whatever else it says, and shares nothing with the observation.
func TestDesiredStatusShowsExemptions(t *testing.T) {
	in := v1alpha1.Exemptions{Namespaces: []string{"celaudit-system", "kube-system"}, Resources: []string{"coordination.k8s.io/leases"},
		Users: []string{"system:serviceaccount:celaudit-system:celaudit"}, Groups: []string{"system:nodes"}}
	for name, o := range map[string]auditPolicyObservation{
		"audited":        {exemptions: in, complete: true},
		"audit pending":  {exemptions: in},
		"does not build": {exemptions: in, problems: []string{"bad"}},
	} {
		st := desiredStatus(auditPolicyAt(1), o, t1)
		want := v1alpha1.Exemptions{Namespaces: []string{"celaudit-system", "kube-system"}, Resources: []string{"coordination.k8s.io/leases"},
			Users: []string{"system:serviceaccount:celaudit-system:celaudit"}, Groups: []string{"system:nodes"}}
		if st.Exemptions == nil || !equality.Semantic.DeepEqual(*st.Exemptions, want) {
			t.Errorf("%s: status.exemptions = %+v, want %+v", name, st.Exemptions, want)
			continue
		}
		st.Exemptions.Namespaces[0] = "changed"
		if in.Namespaces[0] != "celaudit-system" {
			t.Fatalf("%s: the status shares the observation's exemptions", name)
		}
	}
}
