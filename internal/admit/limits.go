package admit

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/apis/core"
)

// maxRequestBodyBytes is the kube-apiserver's default limit of a request body (k8s.io/apiserver
// pkg/server/config.go): a larger create is refused before it is decoded.
const maxRequestBodyBytes = 3 * 1024 * 1024

// MaxDataBytes is the limit of the data of a ConfigMap or Secret (core.MaxSecretSize, checked by
// k8s.io/kubernetes pkg/apis/core/validation ValidateConfigMap and ValidateSecret).
const MaxDataBytes = core.MaxSecretSize

// RequestTooLarge returns the API server's answer to a request whose body has n bytes: 413
// RequestEntityTooLarge with its message (k8s.io/apiserver pkg/endpoints/handlers/rest.go limitedReadBody), nil
// within maxRequestBodyBytes.
func RequestTooLarge(n int) error {
	if n <= maxRequestBodyBytes {
		return nil
	}
	return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", maxRequestBodyBytes))
}

// HasDataLimit reports whether objects of kind gvk have data limited to MaxDataBytes: v1 ConfigMaps and Secrets.
func HasDataLimit(gvk schema.GroupVersionKind) bool {
	return gvk == configMapKind || gvk == secretKind
}

var (
	configMapKind = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	secretKind    = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
)

// DataTooLong returns the field error with which the API server's validation rejects a ConfigMap or Secret
// whose data add up to more than MaxDataBytes, and the bytes they add up to; nil for any other object. obj
// is the object as Prepare returns it (base64 values in binaryData and a Secret's data). The data are counted
// as the validation counts them, on the internal object: a ConfigMap's data and binaryData values (decoded);
// a Secret's data values (decoded) with stringData merged in, as the conversion to the internal version
// merges them. The error is the API server's, with its path: the object itself ("[]") for a ConfigMap,
// data for a Secret.
func DataTooLong(obj *unstructured.Unstructured) (*field.Error, int) {
	var n int
	var path *field.Path
	switch obj.GroupVersionKind() {
	case configMapKind:
		n = sum(obj.Object["data"], func(v string) int { return len(v) }) + sum(obj.Object["binaryData"], base64Len)
		path = field.NewPath("")
	case secretKind:
		sizes := map[string]int{}
		each(obj.Object["data"], func(k, v string) { sizes[k] = base64Len(v) })
		each(obj.Object["stringData"], func(k, v string) { sizes[k] = len(v) })
		for _, s := range sizes {
			n += s
		}
		path = field.NewPath("data")
	default:
		return nil, 0
	}
	if n <= MaxDataBytes {
		return nil, n
	}
	return field.TooLong(path, "", MaxDataBytes), n // the value is unused, as in the API server
}

// each calls f with every string value of m, a map[string]any.
func each(m any, f func(k, v string)) {
	values, _ := m.(map[string]any)
	for k, v := range values {
		if s, ok := v.(string); ok {
			f(k, s)
		}
	}
}

// sum adds up size of every string value of m, a map[string]any.
func sum(m any, size func(string) int) int {
	n := 0
	each(m, func(_, v string) { n += size(v) })
	return n
}

// base64Len is the length of what s, standard base64 with padding as Prepare encodes []byte, decodes to.
func base64Len(s string) int {
	return len(s)/4*3 - (len(s) - len(strings.TrimRight(s, "=")))
}
