package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// billionLaughs is the classic alias bomb: nine levels of nine aliases of the level before, 9^9 strings once
// expanded.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lol}\ndata:\n  a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for c := 'b'; c <= 'i'; c++ {
		prev := string(c - 1)
		fmt.Fprintf(&b, "  %c: &%c [*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s]\n", c, c, prev, prev, prev, prev, prev, prev, prev, prev, prev)
	}
	return b.String()
}

// scalarAliases repeats an alias of one large scalar: few aliases per node decoded, so the YAML parser's alias
// limit lets it through, but every alias is the whole scalar again once converted to JSON.
func scalarAliases(scalarBytes, aliases int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  s: &s %s\n  l:\n", strings.Repeat("x", scalarBytes))
	for i := range aliases {
		fmt.Fprintf(&b, "  - %d\n  - *s\n", i)
	}
	return b.String()
}

// deepBlock nests block sequences n deep in compact notation ("- - - x"), and block mappings m deep by
// indentation, which costs m²/2 bytes.
func deepBlock(n, m int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\nlist:\n" + strings.Repeat("- ", n) + "x\ndata:\n")
	for i := range m {
		b.WriteString(strings.Repeat(" ", i+1) + "a:\n")
	}
	b.WriteString(strings.Repeat(" ", m+1) + "b\n")
	return b.String()
}

// fuzzSeeds are inputs of every shape check and whatif read, and the attacks on YAML parsers: alias bombs,
// nesting 10,000 deep, a 4 MiB scalar.
func fuzzSeeds() []string {
	return []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  replicas: 3\n",
		"{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"ns\"}}\n{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\n\"metadata\":{\"name\":\"b\"}}\n",
		"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n- {kind: Secret}\n",
		"# comment\n---\n---\njust text\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n",
		"{\"apiVersion\":\"v1\",\n\"kind\": }\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\nanchors:\n  x: &x {a: 1}\n  y: *x\n  z: *undefined\n",
		"? [a, b]\n: c\napiVersion: v1\nkind: ConfigMap\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: tags}\ndata: {a: !!binary aGVsbG8=, b: !!float 1, c: 0x10, d: .inf, e: ~}\n",
		billionLaughs(),
		scalarAliases(1<<20, 200),
		deepBlock(10_001, 0),
		deepBlock(9_000, 1_000),
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: flow}\ndata: " + strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001) + "\n",
		"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"data\":" + strings.Repeat("{\"a\":", 10_001) + "1" + strings.Repeat("}", 10_001) + "}",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: huge}\ndata:\n  big: " + strings.Repeat("y", 4<<20) + "\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: huge-quoted}\ndata:\n  big: \"" + strings.Repeat("\\u00e9", 1<<20) + "\"\n",
	}
}

// maxAllocPerInputByte and maxAllocFixed bound what reading one input may allocate: the YAML parser, the
// conversion to JSON and the JSON decoder each copy the document a few times, and no input may make them
// allocate more than that, whatever it expands to.
const (
	maxAllocPerInputByte = 64
	maxAllocFixed        = 64 << 20
)

// FuzzDecode reads arbitrary bytes as a manifest file and checks that it ends with a clear error or with
// objects, never a panic; that parsing documents in parallel gives the same; and that the bytes allocated stay
// within a bound proportional to the input (see maxAllocPerInputByte), so that no input expands in memory.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		one, oneErr := readAll(Reader{}, data)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(maxAllocPerInputByte*len(data)+maxAllocFixed) {
			t.Fatalf("reading %d bytes allocated %d bytes (%q...)", len(data), alloc, data[:min(len(data), 200)])
		}
		if oneErr != nil {
			var e *Error
			if !errors.As(oneErr, &e) || !strings.HasPrefix(oneErr.Error(), "f.yaml:") || e.Err == nil || e.Err.Error() == "" {
				t.Fatalf("error %q (%T), want an *Error naming the file and line", oneErr, oneErr)
			}
		}
		for _, o := range strings.Split(strings.TrimSpace(one), "\n") {
			if o != "" && strings.HasPrefix(o, " ") {
				t.Fatalf("object without a kind: %q", o)
			}
		}
		parallel, parallelErr := readAll(Reader{Workers: 2}, data)
		if parallel != one || fmt.Sprint(parallelErr) != fmt.Sprint(oneErr) {
			t.Fatalf("parsed in parallel:\n%s%v\none by one:\n%s%v", parallel, parallelErr, one, oneErr)
		}
	})
}

// readAll reads data as the file f.yaml and renders each object as "kind apiVersion name line", one a line.
func readAll(r Reader, data []byte) (string, error) {
	var out strings.Builder
	err := r.decode("f.yaml", bytes.NewReader(data), func(o Object) error {
		fmt.Fprintf(&out, "%s %s %s %d\n", o.GVK.Kind, o.GVK.GroupVersion(), o.GetName(), o.Source.Line)
		return nil
	})
	return out.String(), err
}
