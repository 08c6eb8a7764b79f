package controllers

// HoldVAPCompile makes an operator built with o call hold, with the policy's name, before it compiles a
// ValidatingAdmissionPolicy: a test holds one compile back to see what goes on meanwhile.
func HoldVAPCompile(o *Options, hold func(policy string)) { o.beforeVAPCompile = hold }
