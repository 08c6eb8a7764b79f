package audit

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// RedactionMarker replaces each occurrence of a Secret's value in a redacted result.
const RedactionMarker = "[redacted]"

// MinRedactedLength is the length in bytes below which a value is not redacted. Redacting "true", "admin" or
// "5432" would mangle every message that happens to contain such a word, and the marker would then tell where
// the value occurs, disclosing it all the same. Secret values worth keeping secret are longer; and the
// redaction is the last guard only: text computed from a Secret's data is withheld before it gets here, so
// what remains to catch is a coincidence or a defect, not a short value quoted on purpose. Each form of a
// value (raw, base64, escaped) is judged by its own length: the base64 form of a 4-byte value (8 bytes) is
// redacted.
const MinRedactedLength = 6

// Redactor removes the values of one Secret from results. A nil Redactor removes nothing.
type Redactor struct {
	// values are the strings to remove, deduplicated.
	values []string
}

// NewSecretRedactor returns the redactor of secret, the content of a core v1 Secret as unstructured JSON. It
// removes each value of data, both as stored (base64) and decoded, each value of stringData, the
// kubectl.kubernetes.io/last-applied-configuration annotation, and the data and stringData values that
// annotation holds (kubectl apply keeps the applied object there, stringData in plain text). A raw value is
// also removed as it appears quoted by Go (strconv.Quote) and in JSON, when these differ from it. It returns
// nil when there is nothing to remove.
func NewSecretRedactor(secret map[string]any) *Redactor {
	var values []string
	add := func(v string) {
		if len(v) >= MinRedactedLength {
			values = append(values, v)
		}
	}
	addRaw := func(v string) {
		add(v)
		add(strings.Trim(strconv.Quote(v), `"`))
		if j, err := json.Marshal(v); err == nil {
			add(strings.Trim(string(j), `"`))
		}
	}
	addData := func(data, stringData any) {
		for _, v := range stringValues(data) {
			add(v)
			if raw, err := base64.StdEncoding.DecodeString(v); err == nil {
				addRaw(string(raw))
			}
		}
		for _, v := range stringValues(stringData) {
			addRaw(v)
		}
	}
	addData(secret["data"], secret["stringData"])
	if metadata, ok := secret["metadata"].(map[string]any); ok {
		if annotations, ok := metadata["annotations"].(map[string]any); ok {
			if applied, ok := annotations[corev1.LastAppliedConfigAnnotation].(string); ok {
				add(applied)
				var object struct {
					Data       any `json:"data"`
					StringData any `json:"stringData"`
				}
				if json.Unmarshal([]byte(applied), &object) == nil {
					addData(object.Data, object.StringData)
				}
			}
		}
	}
	if len(values) == 0 {
		return nil
	}
	slices.Sort(values)
	return &Redactor{values: slices.Compact(values)}
}

// stringValues returns the string values of m when it is a map.
func stringValues(m any) []string {
	fields, _ := m.(map[string]any)
	var out []string
	for _, v := range fields {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Redact removes the Secret's values from the message and the property values of each result, in place.
// Property maps are replaced, not modified, when a value changes: results may share them.
func (r *Redactor) Redact(results []Result) {
	if r == nil {
		return
	}
	for i := range results {
		res := &results[i]
		res.Message = r.String(res.Message)
		var props map[string]string
		for k, v := range res.Properties {
			if redacted := r.String(v); redacted != v {
				if props == nil {
					props = maps.Clone(res.Properties)
				}
				props[k] = redacted
			}
		}
		if props != nil {
			res.Properties = props
		}
	}
}

// String returns s with every occurrence of a value replaced by RedactionMarker. Occurrences that overlap
// (one value inside another, or two sharing characters) are replaced by a single marker, so that no part of
// either remains.
func (r *Redactor) String(s string) string {
	if r == nil || len(s) < MinRedactedLength {
		return s
	}
	type span struct{ start, end int }
	var spans []span
	for _, v := range r.values {
		for from := 0; from < len(s); {
			i := strings.Index(s[from:], v)
			if i < 0 {
				break
			}
			start := from + i
			spans = append(spans, span{start, start + len(v)})
			from = start + 1
		}
	}
	if len(spans) == 0 {
		return s
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	written := 0 // s[:written] has been handled
	for i := 0; i < len(spans); {
		start, end := spans[i].start, spans[i].end
		for i++; i < len(spans) && spans[i].start <= end; i++ {
			end = max(end, spans[i].end)
		}
		b.WriteString(s[written:start])
		b.WriteString(RedactionMarker)
		written = end
	}
	b.WriteString(s[written:])
	return b.String()
}
