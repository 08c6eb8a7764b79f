// Package differential checks celaudit's verdicts and messages against a real kube-apiserver.
//
// The product promises that, for any stored custom resource, the audit decides what the apiserver
// decides when the object is created, with the same field error text. The tests here create every
// fixture object under its CustomResourceDefinition (a server-side dry run, then a real create of what
// the apiserver accepts), evaluate the same object with internal/crdrules, and compare the two answers
// object by object: rejected exactly when the audit fails or errors, and the apiserver's field errors
// equal to the audit's.
//
// Fixtures live under testdata/crd: each file is one CustomResourceDefinition followed by the objects
// to try, each annotated with what the apiserver is expected to answer, so a wrong fixture is caught
// as well as a wrong audit.
package differential
