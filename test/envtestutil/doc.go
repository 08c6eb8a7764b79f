// Package envtestutil starts a real kube-apiserver and etcd (controller-runtime envtest) with celaudit's
// report CRDs installed, for the integration tests and the demo.
package envtestutil
