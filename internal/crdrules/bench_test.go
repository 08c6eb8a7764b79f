package crdrules

import (
	"context"
	"testing"
)

func BenchmarkEvaluate(b *testing.B) {
	root := specSchema(`type: object
x-kubernetes-validations:
- rule: self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas
  messageExpression: "'replicas (%d) must be between %d and %d'.format([self.replicas, self.minReplicas, self.maxReplicas])"
- rule: self.mode == oldSelf.mode
properties:
  minReplicas: {type: integer}
  replicas: {type: integer}
  maxReplicas: {type: integer}
  mode: {type: string, enum: [fast, slow]}
  ports:
    type: array
    maxItems: 10
    items:
      type: object
      x-kubernetes-validations:
      - rule: self.port > 1024
        message: low port
      properties:
        port: {type: integer}
`)
	p := Compile(newCRD(b, root), Options{})
	for _, bc := range []struct {
		name, body string
		managed    bool
	}{
		{"pass", "spec: {minReplicas: 1, replicas: 2, maxReplicas: 3, mode: fast, ports: [{port: 8080}, {port: 8443}]}", false},
		{"fail", "spec: {minReplicas: 1, replicas: 5, maxReplicas: 3, mode: fast, ports: [{port: 80}, {port: 443}]}", false},
		// A stored object carries the managed fields of each writer: what kubectl apply and a controller leave.
		{"pass-managed-fields", "spec: {minReplicas: 1, replicas: 2, maxReplicas: 3, mode: fast, ports: [{port: 8080}, {port: 8443}]}", true},
	} {
		obj := widget(b, bc.body)
		if bc.managed {
			withManagedFields(b, obj)
		}
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				p.Evaluate(ctx, gvr("v1"), obj)
			}
		})
	}
}
