// Package views holds the cluster views a ValidatingAdmissionPolicy evaluation reads: the served resources
// (vap.ResourceResolver, plus whether a resource is namespaced), namespaces by name (vap.NamespaceGetter) and
// param objects (vap.ParamSource). Each comes in three implementations, one per way celaudit sees a cluster:
//
//   - Informer-backed, for the operator, which follows the cluster: Discovery (refreshed by a Refresher),
//     Params (informers on exactly the param objects bindings reference, never on a withheld kind such as
//     Secret) and InformerNamespaces.
//   - Live, for one run against a cluster (the what-if command): LiveResources reads discovery once;
//     LiveParams and LiveNamespaces read on demand with GET and paginated LIST, each at most once per run.
//   - From files, for the offline check of manifests: FileResources (the built-in API resources of
//     kube-apiserver, from an embedded discovery snapshot, plus the CRDs among the objects), FileParams and
//     FileNamespaces.
//
// The three answer alike for the same objects: missing objects are apierrors NotFound, lists come in
// namespace/name order.
package views
