package listjson

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// errSlowPath makes Decode hand a page to the generic decoder: the body holds something the one-pass
// decoder does not handle itself (invalid JSON, a number out of range, deep nesting, no items, items that are
// not all objects, no kind). The generic decoder then gives the canonical result or error.
var errSlowPath = errors.New("not decoded in one pass")

// maxFastDepth bounds the one-pass decoder's recursion. Deeper bodies go to the generic decoder, which
// allows up to 10,000 levels.
const maxFastDepth = 256

// Interning bounds: map keys repeat across the items of a page ("metadata", "name", label keys), so each
// distinct short key is allocated once per page instead of once per occurrence.
const (
	maxInternedKeyLen = 64
	maxInternedKeys   = 4096
)

// decoder parses a JSON LIST page in one pass into exactly the values utiljson.Unmarshal produces for
// map[string]interface{}: objects as map[string]interface{}, arrays as []interface{} (empty, not nil),
// integers without a fraction point that fit as int64, other numbers as float64, strings unescaped as
// encoding/json unescapes them (escapes and invalid UTF-8 are handed to utiljson itself), duplicate keys
// keeping their last value. Anything else is errSlowPath.
type decoder struct {
	data  []byte
	pos   int
	depth int
	keys  map[string]string
}

// Decode decodes a JSON LIST response into what unstructured.UnstructuredJSONScheme makes of it: the same
// items with the same values and number handling, items without apiVersion and kind (the items of built-in
// lists) given them from the list, and the list's apiVersion, kind and metadata. It reads a page the API
// server sends once, where the generic decoder scans it for items, validates it, decodes it into a map and
// decodes every item a second time. Other bodies go to the generic decoder.
func Decode(data []byte) (*unstructured.UnstructuredList, error) {
	list, err := decodeListFast(data)
	if err == nil {
		return list, nil
	}
	return decodeListSlow(data)
}

// decodeListSlow is Decode's fallback, for bodies the one-pass decoder hands over: client-go's generic
// decoder itself, so that such bodies are accepted, rejected and decoded exactly as client-go would.
func decodeListSlow(data []byte) (*unstructured.UnstructuredList, error) {
	obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, data)
	if err != nil {
		return nil, err
	}
	list, ok := obj.(*unstructured.UnstructuredList)
	if !ok {
		return nil, fmt.Errorf("the response is a single %s, not a list", obj.GetObjectKind().GroupVersionKind().Kind)
	}
	return list, nil
}

func decodeListFast(data []byte) (*unstructured.UnstructuredList, error) {
	d := &decoder{data: data, keys: map[string]string{}}
	d.skipSpace()
	if !d.consume('{') {
		return nil, errSlowPath
	}
	list := &unstructured.UnstructuredList{Object: map[string]interface{}{}}
	var items []map[string]interface{}
	hasItems := false
	d.skipSpace()
	if !d.consume('}') {
		for {
			d.skipSpace()
			key, err := d.str(false)
			if err != nil {
				return nil, err
			}
			d.skipSpace()
			if !d.consume(':') {
				return nil, errSlowPath
			}
			d.skipSpace()
			switch key {
			case "items":
				if items, err = d.items(); err != nil {
					return nil, err
				}
				hasItems = true
			case "apiVersion", "kind", "metadata":
				v, err := d.value()
				if err != nil {
					return nil, err
				}
				if v == nil {
					delete(list.Object, key)
				} else {
					list.Object[key] = v
				}
			default:
				if _, err := d.value(); err != nil {
					return nil, err
				}
			}
			d.skipSpace()
			if d.consume(',') {
				continue
			}
			if d.consume('}') {
				break
			}
			return nil, errSlowPath
		}
	}
	d.skipSpace()
	// Without items the generic decoder sees a single object; without a kind it fails.
	if d.pos != len(d.data) || !hasItems || list.GroupVersionKind().Kind == "" {
		return nil, errSlowPath
	}
	apiVersion, itemKind := list.GetAPIVersion(), strings.TrimSuffix(list.GetKind(), "List")
	list.Items = make([]unstructured.Unstructured, len(items))
	for i, m := range items {
		item := &list.Items[i]
		item.Object = m
		if item.GetKind() == "" && item.GetAPIVersion() == "" {
			item.SetKind(itemKind)
			item.SetAPIVersion(apiVersion)
		}
	}
	return list, nil
}

// items decodes the items array: null, or objects only (anything else takes the slow path, which decides
// what the generic decoder makes of it).
func (d *decoder) items() ([]map[string]interface{}, error) {
	if d.literal("null") {
		return nil, nil
	}
	if !d.consume('[') {
		return nil, errSlowPath
	}
	items := []map[string]interface{}{}
	d.skipSpace()
	if d.consume(']') {
		return items, nil
	}
	for {
		d.skipSpace()
		if !d.consume('{') {
			return nil, errSlowPath
		}
		m, err := d.object()
		if err != nil {
			return nil, err
		}
		items = append(items, m)
		d.skipSpace()
		if d.consume(',') {
			continue
		}
		if d.consume(']') {
			return items, nil
		}
		return nil, errSlowPath
	}
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) consume(c byte) bool {
	if d.pos < len(d.data) && d.data[d.pos] == c {
		d.pos++
		return true
	}
	return false
}

func (d *decoder) literal(lit string) bool {
	if len(d.data)-d.pos >= len(lit) && string(d.data[d.pos:d.pos+len(lit)]) == lit {
		d.pos += len(lit)
		return true
	}
	return false
}

func (d *decoder) value() (interface{}, error) {
	if d.pos >= len(d.data) {
		return nil, errSlowPath
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		d.pos++
		return d.object()
	case c == '[':
		d.pos++
		return d.array()
	case c == '"':
		return d.str(true)
	case c == 't' && d.literal("true"):
		return true, nil
	case c == 'f' && d.literal("false"):
		return false, nil
	case c == 'n' && d.literal("null"):
		return nil, nil
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, errSlowPath
}

// object decodes the members of an object whose '{' has been consumed.
func (d *decoder) object() (map[string]interface{}, error) {
	if d.depth++; d.depth > maxFastDepth {
		return nil, errSlowPath
	}
	defer func() { d.depth-- }()
	m := map[string]interface{}{}
	d.skipSpace()
	if d.consume('}') {
		return m, nil
	}
	for {
		d.skipSpace()
		key, err := d.str(false)
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if !d.consume(':') {
			return nil, errSlowPath
		}
		d.skipSpace()
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		m[key] = v
		d.skipSpace()
		if d.consume(',') {
			continue
		}
		if d.consume('}') {
			return m, nil
		}
		return nil, errSlowPath
	}
}

// array decodes the elements of an array whose '[' has been consumed.
func (d *decoder) array() ([]interface{}, error) {
	if d.depth++; d.depth > maxFastDepth {
		return nil, errSlowPath
	}
	defer func() { d.depth-- }()
	a := []interface{}{}
	d.skipSpace()
	if d.consume(']') {
		return a, nil
	}
	for {
		d.skipSpace()
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		d.skipSpace()
		if d.consume(',') {
			continue
		}
		if d.consume(']') {
			return a, nil
		}
		return nil, errSlowPath
	}
}

// str decodes a string. Plain ones (no escape, valid UTF-8) are copied; the others are unquoted by utiljson
// itself, so that escapes, surrogates and invalid bytes come out exactly as encoding/json makes them. Keys
// (value false) are interned.
func (d *decoder) str(value bool) (string, error) {
	if !d.consume('"') {
		return "", errSlowPath
	}
	start := d.pos
	plain, ascii := true, true
	for {
		if d.pos >= len(d.data) {
			return "", errSlowPath
		}
		c := d.data[d.pos]
		switch {
		case c == '"':
			raw := d.data[start:d.pos]
			d.pos++
			if plain && (ascii || utf8.Valid(raw)) {
				if !value && len(raw) <= maxInternedKeyLen {
					if k, ok := d.keys[string(raw)]; ok {
						return k, nil
					}
					k := string(raw)
					if len(d.keys) < maxInternedKeys {
						d.keys[k] = k
					}
					return k, nil
				}
				return string(raw), nil
			}
			var s string
			if err := utiljson.Unmarshal(d.data[start-1:d.pos], &s); err != nil {
				return "", errSlowPath
			}
			return s, nil
		case c == '\\':
			plain = false
			d.pos += 2
		case c < 0x20:
			return "", errSlowPath
		case c >= utf8.RuneSelf:
			ascii = false
			d.pos++
		default:
			d.pos++
		}
	}
}

// number decodes a number as utiljson does: without a '.', as int64 when it fits; otherwise float64.
// Exponents without a fraction ("1e3") are floats, as they fail to parse as integers.
func (d *decoder) number() (interface{}, error) {
	start := d.pos
	d.consume('-')
	switch {
	case d.consume('0'):
	case d.digits() == 0:
		return nil, errSlowPath
	}
	fraction := false
	if d.consume('.') {
		fraction = true
		if d.digits() == 0 {
			return nil, errSlowPath
		}
	}
	if d.consume('e') || d.consume('E') {
		if !d.consume('+') {
			d.consume('-')
		}
		if d.digits() == 0 {
			return nil, errSlowPath
		}
	}
	s := string(d.data[start:d.pos])
	if !fraction {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, errSlowPath
	}
	return f, nil
}

func (d *decoder) digits() int {
	n := 0
	for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
		d.pos++
		n++
	}
	return n
}
