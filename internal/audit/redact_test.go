package audit

import (
	"testing"
)

// secretOption changes the unstructured content of a test Secret.
type secretOption func(map[string]any)

// newSecret returns the content of a Secret named s, as read from the API, changed by opts.
func newSecret(opts ...secretOption) map[string]any {
	s := map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata":   map[string]any{"name": "s", "namespace": "prod"},
		"type":       "Opaque",
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// withData sets data[key] to encoded, a base64 value written out by the test.
func withData(key, encoded string) secretOption {
	return func(s map[string]any) {
		data, _ := s["data"].(map[string]any)
		if data == nil {
			data = map[string]any{}
			s["data"] = data
		}
		data[key] = encoded
	}
}

func withStringData(key, value string) secretOption {
	return func(s map[string]any) { s["stringData"] = map[string]any{key: value} }
}

func withAnnotation(key, value string) secretOption {
	return func(s map[string]any) {
		s["metadata"].(map[string]any)["annotations"] = map[string]any{key: value}
	}
}

const lastAppliedKey = "kubectl.kubernetes.io/last-applied-configuration"

func TestRedactorString(t *testing.T) {
	const (
		password       = "S3cr3t-P4ssw0rd"
		passwordBase64 = "UzNjcjN0LVA0c3N3MHJk" // base64 of password
		applied        = `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"stringData":{"apikey":"APPLIEDKEY-42"},"data":{"token":"dG9rZW4tMTIzNDU2"}}`
		m              = RedactionMarker
	)
	cases := []struct {
		name   string
		secret map[string]any
		in     string
		want   string
	}{{
		name:   "data, as stored",
		secret: newSecret(withData("password", passwordBase64)),
		in:     "error parsing regexp: missing closing ): `(" + passwordBase64 + "`",
		want:   "error parsing regexp: missing closing ): `(" + m + "`",
	}, {
		name:   "data, decoded",
		secret: newSecret(withData("password", passwordBase64)),
		in:     "password is " + password + ".",
		want:   "password is " + m + ".",
	}, {
		name:   "data, decoded, as Go quotes it",
		secret: newSecret(withData("password", "bGluZTEKbGluZTI=")), // "line1\nline2"
		in:     `parsing "line1\nline2": invalid syntax`,
		want:   `parsing "` + m + `": invalid syntax`,
	}, {
		name:   "every occurrence",
		secret: newSecret(withData("password", passwordBase64)),
		in:     password + " and " + password,
		want:   m + " and " + m,
	}, {
		name:   "stringData",
		secret: newSecret(withStringData("apikey", "plain-key-123")),
		in:     "key plain-key-123",
		want:   "key " + m,
	}, {
		name:   "the last-applied annotation, whole",
		secret: newSecret(withAnnotation(lastAppliedKey, applied)),
		in:     "missing closing ): `(" + applied + "`",
		want:   "missing closing ): `(" + m + "`",
	}, {
		name:   "stringData inside the last-applied annotation",
		secret: newSecret(withAnnotation(lastAppliedKey, applied)),
		in:     "the key is APPLIEDKEY-42",
		want:   "the key is " + m,
	}, {
		name:   "data inside the last-applied annotation, encoded and decoded",
		secret: newSecret(withAnnotation(lastAppliedKey, applied)),
		in:     "dG9rZW4tMTIzNDU2 is token-123456",
		want:   m + " is " + m,
	}, {
		name:   "other annotations are left alone",
		secret: newSecret(withAnnotation("team", "payments-team")),
		in:     "owned by payments-team",
		want:   "owned by payments-team",
	}, {
		name:   "values shorter than the minimum are left alone",
		secret: newSecret(withData("enabled", "dHJ1ZQ==")), // "true"
		in:     "enabled: true",
		want:   "enabled: true",
	}, {
		name:   "but their base64 form is long enough",
		secret: newSecret(withData("enabled", "dHJ1ZQ==")),
		in:     "data.enabled is dHJ1ZQ==",
		want:   "data.enabled is " + m,
	}, {
		name:   "overlapping values leave nothing of either",
		secret: newSecret(withData("a", "YWJjZGVmZ2g="), withData("b", "ZWZnaGlqa2w=")), // "abcdefgh", "efghijkl"
		in:     "x abcdefghijkl y",
		want:   "x " + m + " y",
	}, {
		name:   "a value inside another",
		secret: newSecret(withData("a", "c2VjcmV0LXZhbHVl"), withStringData("b", "xx-secret-value-xx")), // "secret-value"
		in:     "[xx-secret-value-xx]",
		want:   "[" + m + "]",
	}, {
		name:   "a value that is no valid base64 is still redacted as stored",
		secret: newSecret(withData("bad", "not base64!")),
		in:     "value not base64!",
		want:   "value " + m,
	}, {
		name:   "nothing to redact",
		secret: newSecret(withData("password", passwordBase64)),
		in:     "failed expression: object.type == 'Opaque'",
		want:   "failed expression: object.type == 'Opaque'",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NewSecretRedactor(c.secret).String(c.in); got != c.want {
				t.Errorf("String(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
		})
	}
}

func TestRedactorNothingToRedact(t *testing.T) {
	for name, secret := range map[string]map[string]any{
		"no data":                        newSecret(),
		"only short values":              newSecret(withData("a", "eA==")), // "x"
		"data of wrong type":             newSecret(func(s map[string]any) { s["data"] = []any{"UzNjcjN0LVA0c3N3MHJk"} }),
		"annotation not JSON, too short": newSecret(withAnnotation(lastAppliedKey, "{}")),
	} {
		t.Run(name, func(t *testing.T) {
			r := NewSecretRedactor(secret)
			if r != nil {
				t.Errorf("NewSecretRedactor = %+v, want nil", r)
			}
			// A nil redactor changes nothing.
			results := []Result{{Message: "m", Properties: map[string]string{"k": "v"}}}
			r.Redact(results)
			if results[0].Message != "m" || results[0].Properties["k"] != "v" {
				t.Errorf("nil redactor changed %+v", results[0])
			}
		})
	}
}

func TestRedactorResults(t *testing.T) {
	const password = "S3cr3t-P4ssw0rd"
	r := NewSecretRedactor(newSecret(withData("password", "UzNjcjN0LVA0c3N3MHJk")))
	shared := map[string]string{PropRule: "object.data.password == 'x'", "auditAnnotation.p": "p=" + password}
	results := []Result{
		{Rule: "validations[0]", Message: "is " + password, Properties: shared},
		{Rule: "validations[1]", Message: "fine", Properties: shared},
		{Rule: "validations[2]", Message: "fine", Properties: map[string]string{PropRule: "true"}},
	}
	r.Redact(results)
	if got := results[0].Message; got != "is "+RedactionMarker {
		t.Errorf("message = %q", got)
	}
	for i := range 2 {
		if got := results[i].Properties["auditAnnotation.p"]; got != "p="+RedactionMarker {
			t.Errorf("results[%d]: property = %q", i, got)
		}
		if got := results[i].Properties[PropRule]; got != "object.data.password == 'x'" {
			t.Errorf("results[%d]: rule property changed to %q", i, got)
		}
	}
	if shared["auditAnnotation.p"] != "p="+password {
		t.Error("the shared property map was modified rather than replaced")
	}
	if results[2].Properties[PropRule] != "true" || results[2].Message != "fine" {
		t.Errorf("results[2] changed: %+v", results[2])
	}
}
