// Package views holds the cluster views a ValidatingAdmissionPolicy evaluation reads: the served resources
// (vap.ResourceResolver, plus whether a resource is namespaced), namespaces by name (vap.NamespaceGetter) and
// param objects (vap.ParamSource), as the operator keeps them while it follows the cluster: Discovery
// (refreshed by a Refresher), Params (informers on exactly the param objects bindings reference) and
// InformerNamespaces.
package views
