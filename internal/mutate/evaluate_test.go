package mutate

import (
	"encoding/json"
	"testing"
)

const labelPolicy = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: team-label}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{labels: {"team": "blue"}}}
`

const labelBinding = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: team-label}
spec: {policyName: team-label}
`

func TestSmoke(t *testing.T) {
	obj := object(t, `
apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: default}
data: {k: v}
`)
	out := evaluate(t, configMapsGVR, obj, labelPolicy, labelBinding)
	data, _ := json.MarshalIndent(out, "", "  ")
	t.Logf("%s", data)
}
