// Package chart tests the Helm chart in charts/celaudit with the Helm CLI that hack/setup-helm.sh builds (the
// HELM environment variable, set by `make test` and `make test-chart`).
//
// render_test.go lints the chart, renders it with `helm template` and checks the rendered objects: the chart
// holds copies of files generated into config/ (the CRDs, the manager ClusterRole) and of the Grafana dashboard,
// which must equal their originals (`make chart-sync` copies them, `make manifests` runs it); the default
// install must match `kubectl kustomize config/default` object for object, and rbac.readAccess=restricted
// `kubectl kustomize config/restricted`; and each value must change the operator's flags and RBAC as
// documented in values.yaml. rbac_test.go checks what each read access grants.
//
// identity_test.go runs the operator in-process against envtest as the chart installs it: the chart's
// ServiceAccount (a TokenRequest token), the RBAC it renders and the Deployment's arguments parsed with the
// operator's own flags, in the wildcard and the restricted read access, the latter with a CRD group granted
// later through the aggregated reader ClusterRole.
//
// schema_test.go holds values.schema.json to values.yaml (every value typed and described, every object of
// ours closed to unknown keys) and checks that each bad values file in testdata/values (a misspelt key, a
// wrong type, a value outside its enum or bounds, a malformed duration) fails `helm lint --strict` and `helm
// template` with a message naming the key, while the good ones pass.
//
// sharding_test.go renders sharding.enabled: a StatefulSet instead of the Deployment, with the same pod
// template apart from the membership's argument and environment, its headless Service, PodDisruptionBudget and
// member Role, which it checks on a real kube-apiserver (its own StatefulSet only, list and watch by
// metadata.name); with one replica, or disabled, the chart renders byte for byte what the defaults do.
//
// apiserver_test.go installs, upgrades (also to sharded and back) and uninstalls the chart with `helm` against
// a real kube-apiserver (envtest), checks that the shared PolicyReport CRDs are installed only when absent or
// owned by the release, and sends every object the chart renders, under several value combinations, to the
// API server as a server-side dry run with strict field validation.
package chart
