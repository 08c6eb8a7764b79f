package mutate

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The operations Diff produces.
const (
	opAdd     = "add"
	opRemove  = "remove"
	opReplace = "replace"
)

// Operation is one operation of an RFC 6902 JSON patch. Diff produces only add, remove and replace.
type Operation struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	// Value is the value added or replaced (unstructured JSON: maps, slices, strings, numbers, booleans, nil).
	Value any `json:"-"`
}

// MarshalJSON writes the operation as RFC 6902 spells it: value is present, possibly null, for add and
// replace, and absent for remove.
func (o Operation) MarshalJSON() ([]byte, error) {
	if o.Op == opRemove {
		return json.Marshal(struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{o.Op, o.Path})
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{o.Op, o.Path, o.Value})
}

// Diff returns the JSON patch that turns from into to, both unstructured JSON. Maps are compared key by key
// (in sorted order, so that the patch is deterministic); a list is patched element by element when its
// length is unchanged, by appending or removing at its end when one list extends the other, and replaced as
// a whole otherwise. Numbers are equal when their values are (int64 and float64 alike).
func Diff(from, to any) []Operation {
	var ops []Operation
	diff("", from, to, &ops)
	return ops
}

func diff(path string, from, to any, ops *[]Operation) {
	switch f := from.(type) {
	case map[string]any:
		if t, ok := to.(map[string]any); ok {
			diffMap(path, f, t, ops)
			return
		}
	case []any:
		if t, ok := to.([]any); ok {
			diffList(path, f, t, ops)
			return
		}
	}
	if !equalJSON(from, to) {
		*ops = append(*ops, Operation{Op: opReplace, Path: path, Value: to})
	}
}

func diffMap(path string, f, t map[string]any, ops *[]Operation) {
	keys := make([]string, 0, len(f)+len(t))
	for k := range f {
		keys = append(keys, k)
	}
	for k := range t {
		if _, seen := f[k]; !seen {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := path + "/" + escapePointer(k)
		fv, inFrom := f[k]
		tv, inTo := t[k]
		switch {
		case !inTo:
			*ops = append(*ops, Operation{Op: opRemove, Path: p})
		case !inFrom:
			*ops = append(*ops, Operation{Op: opAdd, Path: p, Value: tv})
		default:
			diff(p, fv, tv, ops)
		}
	}
}

func diffList(path string, f, t []any, ops *[]Operation) {
	shorter := min(len(f), len(t))
	prefixEqual := true
	for i := 0; i < shorter && prefixEqual; i++ {
		prefixEqual = equalJSON(f[i], t[i])
	}
	switch {
	case len(f) == len(t):
		for i := range f {
			diff(path+"/"+strconv.Itoa(i), f[i], t[i], ops)
		}
	case prefixEqual && len(t) > len(f):
		for i := len(f); i < len(t); i++ {
			*ops = append(*ops, Operation{Op: opAdd, Path: path + "/" + strconv.Itoa(i), Value: t[i]})
		}
	case prefixEqual:
		for i := len(f) - 1; i >= len(t); i-- {
			*ops = append(*ops, Operation{Op: opRemove, Path: path + "/" + strconv.Itoa(i)})
		}
	default:
		*ops = append(*ops, Operation{Op: opReplace, Path: path, Value: t})
	}
}

// equalJSON reports whether two unstructured JSON values are equal.
func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equalJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb
	}
	return a == b
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// FieldPath returns the field a JSON pointer names as users read it: spec.containers[0].image,
// metadata.labels["app.kubernetes.io/name"].
func FieldPath(pointer string) string {
	if pointer == "" {
		return "<object>"
	}
	var b strings.Builder
	for _, seg := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		seg = unescapePointer(seg)
		switch {
		case isIndex(seg):
			fmt.Fprintf(&b, "[%s]", seg)
		case identifier.MatchString(seg):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(seg)
		default:
			fmt.Fprintf(&b, "[%q]", seg)
		}
	}
	return b.String()
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// changedFields returns the distinct fields ops change, in patch order. A map added or replaced as a whole
// counts as the fields it holds (metadata.labels.team, not metadata.labels), since those are what a reader
// looks for.
func changedFields(ops []Operation) []string {
	var out []string
	var add func(path string, v any)
	add = func(path string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				add(path+"/"+escapePointer(k), m[k])
			}
			return
		}
		if f := FieldPath(path); !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	for _, op := range ops {
		if op.Op == opRemove {
			add(op.Path, nil)
		} else {
			add(op.Path, op.Value)
		}
	}
	return out
}

// BoundedPatch returns ops as JSON, cut after the last operation that fits in max bytes; truncated says that
// some were left out. A single operation longer than max leaves "[]".
func BoundedPatch(ops []Operation, max int) (patch string, truncated bool, err error) {
	var b strings.Builder
	b.WriteByte('[')
	for i, op := range ops {
		data, err := json.Marshal(op)
		if err != nil {
			return "", false, fmt.Errorf("encoding the patch: %w", err)
		}
		if b.Len()+len(data)+2 > max {
			return b.String() + "]", true, nil
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(data)
	}
	return b.String() + "]", false, nil
}
