// Package whatif predicts what a proposed change to a cluster's validation would reject among the objects
// already stored: a new revision of a CustomResourceDefinition, ValidatingAdmissionPolicies and their
// bindings, AuditPolicies, param objects, or a live binding switched to other validationActions; and what
// proposed MutatingAdmissionPolicies would change in them.
//
// The proposal overlays the live cluster: a proposed object replaces the live one of its kind and name (a
// binding, a param object, a namespace), and everything else is read as it is. Each policy the proposal
// touches is paired as it is today and as it would be (Plan), each policy object compiled once, and every
// stored object it covers is read once, page by page, and evaluated under both through the one evaluation
// path of package engine (Run), so that verdicts and messages are the operator's by construction.
//
// Each result under the proposal is compared with today's results on the same object (Compare): it is new
// when the object does not fail that way today, unchanged when it does, and a failure of today that the
// proposal no longer gives is fixed. A failing result also says what the API server would do with the
// object's next UPDATE, which it judges differently from a create: a ValidatingAdmissionPolicy evaluates
// every update it matches, including the no-op updates of a storage version migration, so its denials are
// rejected (or allowed, when the binding does not match updates); a CRD's validation ratchets, so an error of
// a field the update leaves unchanged is dropped. This is decided by running the upstream validation again,
// as an UPDATE whose old object is the stored object, never by reasoning about the rule by hand.
//
// A proposed CRD is evaluated in every version it serves. A version the cluster does not serve yet (one the
// proposal adds) has its stored objects read in a version the cluster serves and converted as the API server
// will convert them once the CRD is applied: upstream's converter for conversion None, then pruning by the
// new version's schema. What cannot be read that way (a webhook conversion) and a version objects are stored
// in that the proposal stops serving are told in Outcome.Notes.
//
// Proposed MutatingAdmissionPolicies and their bindings are evaluated as a chain (see mapPairs): today's and the
// proposed one, each bound as a whole, since a policy's result depends on the policies before it. Their results
// compare as the others do (the same drift is the same finding only with the same patch), and
// Options.Mutations keeps, per stored object the proposed chain would change, the object and the patch.
//
// The package reads the cluster only through a Lister of LIST pages and the views it is given; it writes
// nothing.
package whatif
