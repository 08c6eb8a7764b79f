// Package admit returns objects as the kube-apiserver holds them when it validates their CREATE, so that an
// offline check judges a manifest as the API server would judge it, not as it is written:
//
//   - a custom resource is pruned of the fields its CRD's structural schema does not know, stripped of the
//     nulls of non-nullable fields without a default, defaulted from the schema (pruning at decoding, then
//     defaulting, as apiextensions-apiserver does), its status dropped when the status subresource is
//     enabled and its generation set to 1 (the custom resource strategy's PrepareForCreate);
//   - a built-in object is decoded into its Go type, which drops unknown fields and normalizes quantities,
//     and defaulted by the defaulting functions of the kube-apiserver (k8s.io/kubernetes/pkg/apis/...), then
//     returned in the unstructured form admission sees.
//
// What the API server does after decoding and before validating admission is not reproduced: the system
// metadata (uid, creationTimestamp), the built-in strategies' PrepareForCreate (a Pod's status.phase and
// qosClass, a Deployment's generation) and mutating admission (the ServiceAccount plugin's
// serviceAccountName and token volume, DefaultTolerationSeconds, LimitRanger, mutating webhooks and
// policies). NotApplied says so in words for users.
//
// It also validates CustomResourceDefinitions as the API server validates their creation (ValidateCRD).
package admit
