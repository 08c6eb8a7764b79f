// Package plugin holds end-to-end tests of kubectl-celaudit's cluster commands against a real
// kube-apiserver and etcd (envtest) with the operator running: what the plugin reads is what the operator
// wrote and registered.
package plugin
