package crdrules

import (
	"encoding/json"
	"math"
)

// normalizeObject returns obj with values of the types the apiserver's unstructured JSON decoder produces:
// int64 for integers, float64 for other numbers. CEL rules see integers only as int64; an object decoded
// with encoding/json (float64 everywhere) or built in Go (int) would otherwise fail every integer rule. An
// object that already has those types, as every object read from the API server does, is returned itself
// (the validators only read it); any other is deep-copied with its numbers converted.
func normalizeObject(obj map[string]interface{}) map[string]interface{} {
	if normalized(obj) {
		return obj
	}
	out, _ := normalizeValue(obj).(map[string]interface{})
	return out
}

// normalized reports whether normalizeValue would return v unchanged.
func normalized(v interface{}) bool {
	switch t := v.(type) {
	case map[string]interface{}:
		for _, e := range t {
			if !normalized(e) {
				return false
			}
		}
		return true
	case []interface{}:
		for _, e := range t {
			if !normalized(e) {
				return false
			}
		}
		return true
	case float64:
		return !wholeInt64(t)
	case int64, string, bool, nil:
		return true
	default:
		return false
	}
}

func normalizeValue(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		if t == nil {
			return t
		}
		out := make(map[string]interface{}, len(t))
		for k, e := range t {
			out[k] = normalizeValue(e)
		}
		return out
	case []interface{}:
		if t == nil {
			return t
		}
		out := make([]interface{}, len(t))
		for i, e := range t {
			out[i] = normalizeValue(e)
		}
		return out
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		if f, err := t.Float64(); err == nil {
			return f
		}
		return t.String()
	}
	return normalizeNumber(v)
}

// normalizeNumber returns a Go number as the decoder returns it: int64 when it is whole and fits, float64
// otherwise. Other values are returned as they are.
func normalizeNumber(v interface{}) interface{} {
	switch t := v.(type) {
	case float64:
		return normalizeFloat(t)
	case float32:
		return normalizeFloat(float64(t))
	case int:
		return int64(t)
	case int8:
		return int64(t)
	case int16:
		return int64(t)
	case int32:
		return int64(t)
	case uint:
		return normalizeUint(uint64(t))
	case uint8:
		return int64(t)
	case uint16:
		return int64(t)
	case uint32:
		return int64(t)
	case uint64:
		return normalizeUint(t)
	}
	return v
}

// normalizeFloat turns a whole number into int64, as the decoder does for a JSON number written
// without fraction or exponent.
func normalizeFloat(f float64) interface{} {
	if wholeInt64(f) {
		return int64(f)
	}
	return f
}

// wholeInt64 reports whether f is a whole number within int64 range.
func wholeInt64(f float64) bool {
	return f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 && !math.IsInf(f, 0)
}

func normalizeUint(u uint64) interface{} {
	if u <= math.MaxInt64 {
		return int64(u)
	}
	return float64(u)
}

// forValidation returns obj normalized (see normalizeObject) and without metadata.managedFields, leaving obj
// itself unchanged. The apiserver's metadata validation converts the whole metadata to a typed ObjectMeta,
// and for a stored object most of that work is its managed fields, whose fieldsV1 are re-encoded as JSON:
// about half of the schema validation's cost. Dropping them changes no verdict: the only check that reads
// them is the syntax of managed fields, which the API server wrote itself and validated on every write of
// the object; the schema has no say over metadata beyond name and generateName, and CEL rules see only
// those two.
func forValidation(obj map[string]interface{}) map[string]interface{} {
	obj = normalizeObject(obj)
	meta, ok := obj["metadata"].(map[string]interface{})
	if !ok {
		return obj
	}
	if _, has := meta["managedFields"]; !has {
		return obj
	}
	stripped := make(map[string]interface{}, len(meta)-1)
	for k, v := range meta {
		if k != "managedFields" {
			stripped[k] = v
		}
	}
	out := make(map[string]interface{}, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	out["metadata"] = stripped
	return out
}
