package vap

import (
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// maxConvertedParams bounds the params a policy keeps converted. Past it the cache starts over: a policy
// reading more params than this only loses the saving, never correctness.
const maxConvertedParams = 4096

// paramCache keeps the CEL input of each version of each unstructured param. The apiserver's activation
// converts an unstructured param for every evaluation by a JSON round trip (common.SchemalessTypedToVal);
// the same param version always converts to the same value, and an audit evaluates one param against
// thousands of objects.
type paramCache struct {
	mu   sync.Mutex
	byRV map[paramVersion]*convertedParam
}

type paramVersion struct {
	uid             types.UID
	resourceVersion string
}

// of returns param, or an equivalent param that hands CEL its converted content without converting again.
// Params without a UID and resourceVersion, which cannot be told apart from their next version, are not
// cached.
func (c *paramCache) of(param *unstructured.Unstructured) runtime.Object {
	key := paramVersion{uid: param.GetUID(), resourceVersion: param.GetResourceVersion()}
	if key.uid == "" || key.resourceVersion == "" {
		return param
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.byRV[key]; ok {
		return p
	}
	if c.byRV == nil || len(c.byRV) >= maxConvertedParams {
		c.byRV = map[paramVersion]*convertedParam{}
	}
	p := &convertedParam{Unstructured: param}
	p.content, p.err = toUnstructured(param)
	c.byRV[key] = p
	return p
}

// toUnstructured converts param exactly as common.SchemalessTypedToVal does before handing it to CEL.
func toUnstructured(param *unstructured.Unstructured) (any, error) {
	v := reflect.ValueOf(param)
	return value.TypeReflectEntryOf(v.Type()).ToUnstructured(v)
}

// convertedParam is an unstructured param with its CEL input converted once. It is a
// value.UnstructuredConverterWithError, which the activation uses instead of the JSON round trip.
type convertedParam struct {
	*unstructured.Unstructured
	content any
	err     error
}

func (p *convertedParam) ToUnstructuredWithError() (any, error) { return p.content, p.err }
