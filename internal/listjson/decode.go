package listjson

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// errSlowPath makes DecodePage hand a page to the generic decoder: the body holds something the one-pass
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
	// intern adds new keys to keys; false while decoding an item, when keys is shared and read-only.
	intern bool
}

// Page is a LIST page whose items are decoded one at a time, when they are used: a decoded object takes
// several times the memory of its JSON, and an audit only needs the objects it is evaluating.
type Page struct {
	// List holds the page's apiVersion, kind and metadata (resourceVersion, continue). Its Items are empty.
	List *unstructured.UnstructuredList

	data       []byte
	raw        [][2]int                    // each item's span in data
	decoded    []unstructured.Unstructured // instead of raw, when the generic decoder read the page
	keys       map[string]string           // the page's short map keys, read-only once the page is scanned
	apiVersion string
	itemKind   string
}

// DecodePage reads a JSON LIST response. A page as the API server sends it is checked in one pass, which
// accepts exactly what the generic decoder accepts, and its items are decoded by Item. Other bodies go to
// the generic decoder whole, so that they are accepted, rejected and decoded exactly as client-go would.
// The page keeps data: it must not be modified.
func DecodePage(data []byte) (*Page, error) {
	page, err := scanPage(data)
	if err == nil {
		return page, nil
	}
	list, err := decodeListSlow(data)
	if err != nil {
		return nil, err
	}
	items := list.Items
	list.Items = nil
	return &Page{List: list, decoded: items}, nil
}

// Generic reports whether the page was handed to client-go's generic decoder whole, rather than read by the
// one-pass scan: the API server's pages never are.
func (p *Page) Generic() bool {
	return p.raw == nil
}

// Len is the number of items.
func (p *Page) Len() int {
	if p.raw == nil {
		return len(p.decoded)
	}
	return len(p.raw)
}

// Item returns item i, decoding it anew at each call on a page the one-pass decoder read. It is safe for
// concurrent use. The error is only possible if the decoders disagree on what the scan accepted.
func (p *Page) Item(i int) (*unstructured.Unstructured, error) {
	if p.raw == nil {
		return &p.decoded[i], nil
	}
	if item, err := p.onePassItem(i); err == nil {
		return item, nil
	}
	// What the generic decoder does with each item.
	m := map[string]interface{}{}
	if err := utiljson.Unmarshal(p.data[p.raw[i][0]:p.raw[i][1]], &m); err != nil {
		return nil, fmt.Errorf("decoding item %d of the page: %w", i, err)
	}
	return p.withKind(m), nil
}

// ShardSelector returns the list's metadata.shardInfo.selector: the KEP-5866 shard selector the API server
// applied to the list, "" when it applied none (it does not have the ShardedListAndWatch feature, or the
// request carried no selector).
func (p *Page) ShardSelector() string {
	s, _, _ := unstructured.NestedString(p.List.Object, "metadata", "shardInfo", "selector")
	return s
}

// ItemMeta returns the namespace, name and UID of item i. On a page the one-pass decoder read, only the
// item's metadata is decoded: filtering a page on the client costs a fraction of decoding it.
func (p *Page) ItemMeta(i int) (*metav1.PartialObjectMetadata, error) {
	if p.raw != nil {
		if m, err := p.onePassMeta(i); err == nil {
			return m, nil
		}
	}
	// Metadata the one-pass reading does not take as it is (not an object, fields that are not strings):
	// what the item decodes to says.
	item, err := p.Item(i)
	if err != nil {
		return nil, err
	}
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: item.GetNamespace(), Name: item.GetName(), UID: item.GetUID(),
	}}, nil
}

// onePassMeta reads the namespace, name and UID of item i in one pass, skipping everything else. A repeated
// metadata key replaces the earlier one whole, as it does when the item is decoded.
func (p *Page) onePassMeta(i int) (*metav1.PartialObjectMetadata, error) {
	d := &decoder{data: p.data[p.raw[i][0]:p.raw[i][1]], keys: p.keys, pos: 1}
	m := &metav1.PartialObjectMetadata{}
	err := d.members(func(key string) error {
		if key != "metadata" {
			return d.skip()
		}
		m.ObjectMeta = metav1.ObjectMeta{}
		if !d.consume('{') {
			return errSlowPath
		}
		return d.members(func(field string) error {
			var dst *string
			switch field {
			case "namespace":
				dst = &m.Namespace
			case "name":
				dst = &m.Name
			case "uid":
				dst = (*string)(&m.UID)
			default:
				return d.skip()
			}
			v, err := d.value()
			if err != nil {
				return err
			}
			s, ok := v.(string)
			if !ok {
				return errSlowPath
			}
			*dst = s
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Keep keeps the items for which keep returns true, in their order, and drops the others; on an error it
// changes nothing. The list's own metadata (resourceVersion, continue, remainingItemCount, shardInfo) stays
// exactly as the API server sent it: a page filtered down to no item still leads to the next page, and a
// paginated list is read to its end.
func (p *Page) Keep(keep func(i int) (bool, error)) error {
	n := p.Len()
	kept := make([]bool, n)
	for i := range n {
		k, err := keep(i)
		if err != nil {
			return err
		}
		kept[i] = k
	}
	if p.raw == nil {
		items := make([]unstructured.Unstructured, 0, n)
		for i, k := range kept {
			if k {
				items = append(items, p.decoded[i])
			}
		}
		p.decoded = items
		return nil
	}
	raw := make([][2]int, 0, n)
	for i, k := range kept {
		if k {
			raw = append(raw, p.raw[i])
		}
	}
	p.raw = raw
	return nil
}

// onePassItem decodes item i in one pass, without falling back. The scan checked that it is an object.
func (p *Page) onePassItem(i int) (*unstructured.Unstructured, error) {
	d := &decoder{data: p.data[p.raw[i][0]:p.raw[i][1]], keys: p.keys, pos: 1}
	m, err := d.object()
	if err != nil {
		return nil, err
	}
	return p.withKind(m), nil
}

// withKind gives an item without apiVersion and kind (the items of built-in lists) those of the list, as
// the generic decoder does.
func (p *Page) withKind(m map[string]interface{}) *unstructured.Unstructured {
	item := &unstructured.Unstructured{Object: m}
	if item.GetKind() == "" && item.GetAPIVersion() == "" {
		item.SetKind(p.itemKind)
		item.SetAPIVersion(p.apiVersion)
	}
	return item
}

// decodeListSlow is the fallback, for bodies the one-pass decoder hands over: client-go's generic decoder.
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

// scanPage checks a page in one pass and finds its items. It decodes only the list's own apiVersion, kind
// and metadata, and collects the page's map keys for interning.
func scanPage(data []byte) (*Page, error) {
	d := &decoder{data: data, keys: map[string]string{}, intern: true}
	d.skipSpace()
	if !d.consume('{') {
		return nil, errSlowPath
	}
	list := &unstructured.UnstructuredList{Object: map[string]interface{}{}}
	var items [][2]int
	hasItems := false
	err := d.members(func(key string) error {
		switch key {
		case "items":
			var err error
			items, err = d.items()
			hasItems = true
			return err
		case "apiVersion", "kind", "metadata":
			v, err := d.value()
			if err != nil {
				return err
			}
			if v == nil {
				delete(list.Object, key)
			} else {
				list.Object[key] = v
			}
			return nil
		default:
			return d.skip()
		}
	})
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	// Without items the generic decoder sees a single object; without a kind it fails.
	if d.pos != len(d.data) || !hasItems || list.GroupVersionKind().Kind == "" {
		return nil, errSlowPath
	}
	if items == nil {
		items = [][2]int{}
	}
	return &Page{
		List:       list,
		data:       data,
		raw:        items,
		keys:       d.keys,
		apiVersion: list.GetAPIVersion(),
		itemKind:   strings.TrimSuffix(list.GetKind(), "List"),
	}, nil
}

// items checks the items array and returns the span of each item: null, or objects only (anything else
// takes the slow path, which decides what the generic decoder makes of it).
func (d *decoder) items() ([][2]int, error) {
	if d.literal("null") {
		return nil, nil
	}
	if !d.consume('[') {
		return nil, errSlowPath
	}
	items := [][2]int{}
	err := d.elements(func() error {
		start := d.pos
		if d.pos >= len(d.data) || d.data[d.pos] != '{' {
			return errSlowPath
		}
		if err := d.skip(); err != nil {
			return err
		}
		items = append(items, [2]int{start, d.pos})
		return nil
	})
	return items, err
}

// members walks the members of an object whose '{' has been consumed: member is called with each key, the
// value next, and reads the value.
func (d *decoder) members(member func(key string) error) error {
	return d.container('}', func() error {
		key, err := d.str(false)
		if err != nil {
			return err
		}
		d.skipSpace()
		if !d.consume(':') {
			return errSlowPath
		}
		d.skipSpace()
		return member(key)
	})
}

// elements walks the elements of an array whose '[' has been consumed: element reads each one.
func (d *decoder) elements(element func() error) error {
	return d.container(']', element)
}

// container walks the comma-separated entries of an object or array whose opening bracket has been
// consumed, up to end, within the nesting bound. The scan counts the list and its items array too, so it
// is two levels stricter than an item's decoding, never looser.
func (d *decoder) container(end byte, entry func() error) error {
	if d.depth++; d.depth > maxFastDepth {
		return errSlowPath
	}
	defer func() { d.depth-- }()
	d.skipSpace()
	if d.consume(end) {
		return nil
	}
	for {
		d.skipSpace()
		if err := entry(); err != nil {
			return err
		}
		d.skipSpace()
		if d.consume(',') {
			continue
		}
		if d.consume(end) {
			return nil
		}
		return errSlowPath
	}
}

// skip checks a value without building it, accepting exactly what value decodes: the same grammar, depth
// bound and number range, and the escapes encoding/json accepts. Keys are collected for interning.
func (d *decoder) skip() error {
	if d.pos >= len(d.data) {
		return errSlowPath
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		d.pos++
		return d.members(func(string) error { return d.skip() })
	case c == '[':
		d.pos++
		return d.elements(d.skip)
	case c == '"':
		_, _, err := d.skipString()
		return err
	case c == 't' && d.literal("true"), c == 'f' && d.literal("false"), c == 'n' && d.literal("null"):
		return nil
	case c == '-' || c >= '0' && c <= '9':
		_, err := d.number(false)
		return err
	}
	return errSlowPath
}

// skipString checks a string whose opening quote is next and returns its contents, and whether they are
// plain: without escapes and valid UTF-8, so that the string is the bytes themselves.
func (d *decoder) skipString() (raw []byte, plain bool, err error) {
	if !d.consume('"') {
		return nil, false, errSlowPath
	}
	start := d.pos
	plain = true
	ascii := true
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			raw = d.data[start:d.pos]
			d.pos++
			return raw, plain && (ascii || utf8.Valid(raw)), nil
		case c == '\\':
			plain = false
			if d.pos+1 >= len(d.data) {
				return nil, false, errSlowPath
			}
			switch d.data[d.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				d.pos += 2
			case 'u':
				if d.pos+6 > len(d.data) {
					return nil, false, errSlowPath
				}
				for _, h := range d.data[d.pos+2 : d.pos+6] {
					if !isHex(h) {
						return nil, false, errSlowPath
					}
				}
				d.pos += 6
			default:
				return nil, false, errSlowPath
			}
		case c < 0x20:
			return nil, false, errSlowPath
		case c >= utf8.RuneSelf:
			ascii = false
			d.pos++
		default:
			d.pos++
		}
	}
	return nil, false, errSlowPath
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
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
		return d.number(true)
	}
	return nil, errSlowPath
}

// object decodes the members of an object whose '{' has been consumed.
func (d *decoder) object() (map[string]interface{}, error) {
	m := map[string]interface{}{}
	err := d.members(func(key string) error {
		v, err := d.value()
		m[key] = v
		return err
	})
	return m, err
}

// array decodes the elements of an array whose '[' has been consumed.
func (d *decoder) array() ([]interface{}, error) {
	a := []interface{}{}
	err := d.elements(func() error {
		v, err := d.value()
		a = append(a, v)
		return err
	})
	return a, err
}

// str decodes a string. Plain ones (no escape, valid UTF-8) are copied; the others are unquoted by utiljson
// itself, so that escapes, surrogates and invalid bytes come out exactly as encoding/json makes them. Keys
// (value false) are interned: added to the page's table while scanning, looked up when decoding an item.
func (d *decoder) str(value bool) (string, error) {
	start := d.pos
	raw, plain, err := d.skipString()
	if err != nil {
		return "", err
	}
	if !plain {
		var s string
		if err := utiljson.Unmarshal(d.data[start:d.pos], &s); err != nil {
			return "", errSlowPath
		}
		return s, nil
	}
	if value || len(raw) > maxInternedKeyLen {
		return string(raw), nil
	}
	if k, ok := d.keys[string(raw)]; ok {
		return k, nil
	}
	k := string(raw)
	if d.intern && len(d.keys) < maxInternedKeys {
		d.keys[k] = k
	}
	return k, nil
}

// number decodes a number as utiljson does: without a '.', as int64 when it fits; otherwise float64.
// Exponents without a fraction ("1e3") are floats, as they fail to parse as integers. Without build it only
// checks the number, including that it is within float64 range as utiljson requires.
func (d *decoder) number(build bool) (interface{}, error) {
	start := d.pos
	d.consume('-')
	switch {
	case d.consume('0'):
	case d.digits() == 0:
		return nil, errSlowPath
	}
	fraction, exponent := false, false
	if d.consume('.') {
		fraction = true
		if d.digits() == 0 {
			return nil, errSlowPath
		}
	}
	if d.consume('e') || d.consume('E') {
		exponent = true
		if !d.consume('+') {
			d.consume('-')
		}
		if d.digits() == 0 {
			return nil, errSlowPath
		}
	}
	// Only an exponent or hundreds of digits can put a number out of float64 range.
	if !build && !exponent && d.pos-start < 300 {
		return nil, nil
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
