package vap

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

func TestSmoke(t *testing.T) {
	p := Compile(newPolicy("p", withValidation("object.spec.replicas < 3", message("too many"))),
		[]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("b", "p")}, testDeps(t), Options{})
	t.Logf("resources %v", p.Resources())
	for _, r := range p.Evaluate(defaultTestContext, deploymentsGVR, newDeployment("prod", "d", 5)) {
		t.Logf("%+v", r)
	}
}
