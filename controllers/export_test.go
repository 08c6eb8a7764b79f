package controllers

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/celaudit/celaudit/internal/vap"
)

// HoldVAPCompile makes an operator built with o call hold, with the policy's name, before it compiles a
// ValidatingAdmissionPolicy: a test holds one compile back to see what goes on meanwhile.
func HoldVAPCompile(o *Options, hold func(policy string)) {
	o.compileVAP = func(p *admissionregistrationv1.ValidatingAdmissionPolicy, opts vap.Options) *vap.Compiled {
		hold(p.Name)
		return vap.CompilePolicy(p, opts)
	}
}
