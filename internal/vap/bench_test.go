package vap

import "testing"

// BenchmarkEvaluate measures the evaluation of one object against a policy with one validation and one
// binding: matching, parameter collection, CEL evaluation and result building.
func BenchmarkEvaluate(b *testing.B) {
	for _, c := range []struct {
		name     string
		replicas int64
	}{{"pass", 1}, {"fail", 5}} {
		b.Run(c.name, func(b *testing.B) {
			p := CompilePolicy(newPolicy("p", withValidation(replicasRule, messageExpression("'replicas: ' + string(object.spec.replicas)"))),
				Options{}).Bind(
				bindings{newBinding("b", "p")}, testDeps(b))

			obj := newDeployment("prod", "d", c.replicas)
			b.ReportAllocs()
			for b.Loop() {
				if len(p.Evaluate(defaultTestContext, deploymentsGVR, obj)) != 1 {
					b.Fatal("want one result")
				}
			}
		})
	}
}

// BenchmarkCompile measures compiling a policy with one validation, which CacheKey lets controllers avoid.
func BenchmarkCompile(b *testing.B) {
	policy := newPolicy("p", withValidation(replicasRule))
	b.ReportAllocs()
	for b.Loop() {
		CompilePolicy(policy, Options{})
	}
}
