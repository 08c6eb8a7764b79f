package admit

import "k8s.io/apimachinery/pkg/runtime"

// BuiltinScheme returns a new scheme holding the internal and versioned types of every group of stored
// built-in objects, with the kube-apiserver's conversions and defaulting functions: what the API server
// decodes, converts and defaults built-in objects with during admission.
func BuiltinScheme() *runtime.Scheme { return builtinScheme() }
