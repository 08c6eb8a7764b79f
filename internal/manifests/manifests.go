package manifests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	yamlv2 "go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
)

// Stdin is the path that stands for standard input.
const Stdin = "-"

// Source is where an object was read: a file ("-" for standard input) and the line its document starts on.
type Source struct {
	File string
	Line int
}

func (s Source) String() string {
	name := s.File
	if name == Stdin {
		name = "<stdin>"
	}
	return name + ":" + strconv.Itoa(s.Line)
}

// Object is one object read from the inputs.
type Object struct {
	// Unstructured is the object's content; nil when the object was read undecoded (see Reader.Undecoded).
	*unstructured.Unstructured
	Source Source
	// GVK is the object's apiVersion and kind, set whether or not its content was decoded.
	GVK schema.GroupVersionKind
	// JSON is the object as the JSON it was decoded from, for readers that pass it on without encoding it
	// again; nil for the items of a List. It may span lines.
	JSON []byte
}

// Error is a problem with the inputs: a file that cannot be read, a document that does not parse or is not
// a Kubernetes object. Its message starts with the file and line.
type Error struct {
	Source Source
	Err    error
}

func (e *Error) Error() string { return e.Source.String() + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Reader reads objects from paths.
type Reader struct {
	// Stdin is read for the path "-" (at most once: a second "-" is an error).
	Stdin io.Reader
	// Workers is how many documents are parsed at once (YAML parsing is most of the cost of reading); the
	// objects are still visited one at a time, in order. 0 or 1 parses one document at a time.
	Workers int
	// Undecoded, when set, says which objects are visited without their content decoded: Unstructured nil,
	// GVK and JSON set. Reading the kind alone is a scan of the JSON that builds no maps, a fraction of the
	// cost of decoding it, for a caller that only passes the JSON on. The items of a List are always decoded.
	// It is called from the parsing workers, concurrently.
	Undecoded func(schema.GroupVersionKind) bool
}

// files returns the files paths stand for, in order (see Walk).
func files(paths []string) ([]string, error) {
	var out []string
	stdin := false
	for _, p := range paths {
		if p == Stdin {
			if stdin {
				return nil, &Error{Source: Source{File: Stdin}, Err: errors.New("standard input given twice")}
			}
			stdin = true
			out = append(out, p)
			continue
		}
		info, err := os.Stat(p)
		if err != nil {
			return nil, &Error{Source: Source{File: p}, Err: pathError(err)}
		}
		if !info.IsDir() {
			out = append(out, p)
			continue
		}
		n := len(out)
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return &Error{Source: Source{File: path}, Err: pathError(err)}
			}
			if path != p && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.IsDir() && isManifest(path) {
				out = append(out, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(out) == n {
			return nil, &Error{Source: Source{File: p}, Err: errors.New("directory holds no .yaml, .yml or .json files")}
		}
	}
	return out, nil
}

func isManifest(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// pathError drops the path os errors repeat, since Error prints it first.
func pathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// Walk reads the objects of every file paths stand for and calls visit with each, in order. A directory
// stands for the manifest files under it in lexical order (hidden entries skipped), "-" for standard input. A
// path that does not exist is an error; so is a directory without manifest files, which is almost always a
// wrong path. It stops at the first error: an *Error for bad inputs, or what visit returned.
func (r Reader) Walk(paths []string, visit func(Object) error) error {
	names, err := files(paths)
	if err != nil {
		return err
	}
	for _, f := range names {
		if err := r.walkFile(f, visit); err != nil {
			return err
		}
	}
	return nil
}

// Read returns every object of paths (see Walk).
func (r Reader) Read(paths []string) ([]Object, error) {
	var out []Object
	err := r.Walk(paths, func(o Object) error {
		out = append(out, o)
		return nil
	})
	return out, err
}

func (r Reader) walkFile(name string, visit func(Object) error) error {
	var in io.Reader
	if name == Stdin {
		if r.Stdin == nil {
			return &Error{Source: Source{File: Stdin}, Err: errors.New("no standard input")}
		}
		in = r.Stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return &Error{Source: Source{File: name}, Err: pathError(err)}
		}
		defer func() { _ = f.Close() }()
		in = f
	}
	return r.decode(name, in, visit)
}

// document is one document of a file, and once parsed its objects or the error that stops the reading.
type document struct {
	src     Source
	data    []byte
	objects []Object
	err     error
}

// batchPerWorker is how many documents each worker parses per batch: enough to keep it busy, few enough
// to hold little.
const batchPerWorker = 32

// decode reads the documents of one file, named name in errors, and calls visit with each object.
func (r Reader) decode(name string, in io.Reader, visit func(Object) error) error {
	workers := r.Workers
	if workers <= 1 {
		return split(name, in, func(src Source, data []byte) error { return r.decodeDocument(src, data, visit) })
	}
	var batch []document
	run := func() error {
		defer func() { batch = batch[:0] }()
		var wg sync.WaitGroup
		next := make(chan int)
		for range workers {
			wg.Go(func() {
				for i := range next {
					d := &batch[i]
					d.err = r.decodeDocument(d.src, d.data, func(o Object) error {
						d.objects = append(d.objects, o)
						return nil
					})
				}
			})
		}
		for i := range batch {
			next <- i
		}
		close(next)
		wg.Wait()
		// A document's objects read before its error (the items of a List before a bad one) are visited
		// first, as when documents are parsed one at a time.
		for _, d := range batch {
			for _, o := range d.objects {
				if err := visit(o); err != nil {
					return err
				}
			}
			if d.err != nil {
				return d.err
			}
		}
		return nil
	}
	err := split(name, in, func(src Source, data []byte) error {
		batch = append(batch, document{src: src, data: bytes.Clone(data)})
		if len(batch) < workers*batchPerWorker {
			return nil
		}
		return run()
	})
	if err != nil {
		return err
	}
	return run()
}

// split reads the documents of one file, named name in errors, and calls doc with each, where it starts
// and its bytes (which are reused after doc returns).
func split(name string, in io.Reader, doc func(Source, []byte) error) error {
	lines := bufio.NewReaderSize(in, 64<<10)
	var buf bytes.Buffer
	line, start := 0, 1
	flush := func() error {
		defer buf.Reset()
		return doc(Source{File: name, Line: start}, buf.Bytes())
	}
	for {
		text, err := lines.ReadBytes('\n')
		if len(text) > 0 {
			line++
			if isSeparator(text) {
				if err := flush(); err != nil {
					return err
				}
				start = line + 1
			} else {
				buf.Write(text)
			}
		}
		if errors.Is(err, io.EOF) {
			return flush()
		}
		if err != nil {
			return &Error{Source: Source{File: name, Line: line}, Err: err}
		}
	}
}

// isSeparator reports whether line separates YAML documents: "---" alone or followed by a comment or spaces.
func isSeparator(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("---")) {
		return false
	}
	rest := bytes.TrimSpace(line[3:])
	return len(rest) == 0 || rest[0] == '#'
}

// decodeDocument decodes one YAML document or JSON stream that starts on src.Line.
func (r Reader) decodeDocument(src Source, doc []byte, visit func(Object) error) error {
	trimmed := bytes.TrimSpace(doc)
	if len(trimmed) == 0 || onlyComments(trimmed) {
		return nil
	}
	if trimmed[0] == '{' {
		return r.decodeJSONStream(src, doc, visit)
	}
	if expandsTooFar(doc) {
		return &Error{Source: src, Err: tooExpanded()}
	}
	data, err := utilyaml.ToJSON(doc)
	if err != nil {
		if yamlTooDeep(err) {
			return &Error{Source: src, Err: tooDeep()}
		}
		return &Error{Source: src, Err: yamlError(err, src.Line)}
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	return r.decodeObject(src, data, visit)
}

// decodeJSONStream decodes one or more JSON objects in a row, each reported at the line it starts on.
func (r Reader) decodeJSONStream(src Source, doc []byte, visit func(Object) error) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	for {
		offset := dec.InputOffset()
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return nil
		}
		at := src
		at.Line += lineOf(doc, int(offset)+leadingSpace(doc[offset:])) - 1
		if err != nil {
			var syntax *json.SyntaxError
			switch {
			case jsonTooDeep(err):
				return &Error{Source: at, Err: tooDeep()}
			case errors.As(err, &syntax):
				at.Line = src.Line + lineOf(doc, int(syntax.Offset)) - 1
			}
			return &Error{Source: at, Err: fmt.Errorf("invalid JSON: %w", err)}
		}
		if err := r.decodeObject(at, raw, visit); err != nil {
			return err
		}
	}
}

func onlyComments(doc []byte) bool {
	for l := range bytes.SplitSeq(doc, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}

func leadingSpace(b []byte) int { return len(b) - len(bytes.TrimLeft(b, " \t\r\n")) }

// lineOf returns the 1-based line of offset in b.
func lineOf(b []byte, offset int) int {
	offset = min(offset, len(b))
	return 1 + bytes.Count(b[:offset], []byte("\n"))
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// yamlError rewrites the document-relative line numbers of a YAML error to lines of the file.
func yamlError(err error, start int) error {
	msg := yamlLine.ReplaceAllStringFunc(err.Error(), func(m string) string {
		n, _ := strconv.Atoi(m[len("line "):])
		return "line " + strconv.Itoa(n+start-1)
	})
	return errors.New(msg)
}

// decodeObject decodes one JSON object into an Object, expanding a List into its items; an object of a kind
// r.Undecoded accepts is visited with its kind and JSON only.
func (r Reader) decodeObject(src Source, data []byte, visit func(Object) error) error {
	if r.Undecoded != nil {
		if gvk, ok := kindOf(data); ok && r.Undecoded(gvk) {
			return visit(Object{Source: src, GVK: gvk, JSON: data})
		}
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		return &Error{Source: src, Err: objectError(err, data)}
	}
	if obj.IsList() {
		list, err := obj.ToList()
		if err != nil {
			return &Error{Source: src, Err: err}
		}
		for i := range list.Items {
			item := &list.Items[i]
			if item.GetKind() == "" || item.GetAPIVersion() == "" {
				return &Error{Source: src, Err: fmt.Errorf("item %d of the %s has no apiVersion or kind", i, obj.GetKind())}
			}
			if err := visit(Object{Unstructured: item, Source: src, GVK: item.GroupVersionKind()}); err != nil {
				return err
			}
		}
		return nil
	}
	return visit(Object{Unstructured: obj, Source: src, GVK: obj.GroupVersionKind(), JSON: data})
}

// kindOf returns the apiVersion and kind of the object whose JSON is data, as the unstructured decoder reads
// them, without decoding the rest: false for what that decoder handles otherwise (a List, no kind) or rejects,
// which is then decoded in full for its items or its error.
func kindOf(data []byte) (schema.GroupVersionKind, bool) {
	var head struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Items      json.RawMessage `json:"items"`
	}
	// The unstructured decoder's JSON decoder: case-sensitive keys, the last of duplicate keys wins.
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &head); err != nil || head.Kind == "" || head.Items != nil {
		return schema.GroupVersionKind{}, false
	}
	gv, err := schema.ParseGroupVersion(head.APIVersion)
	if err != nil {
		return schema.GroupVersionKind{}, false // the decoder finds no kind in it: an error
	}
	return gv.WithKind(head.Kind), true
}

// maxDepth is how deep the decoders of YAML (goyaml) and of JSON (encoding/json, and sigs.k8s.io/json in the
// API server) nest mappings and lists at most.
const maxDepth = 10000

// tooDeep is the error of a document whose mappings and lists nest deeper than maxDepth, whichever decoder
// found it: the YAML parser for block style, the JSON decoder for flow style (YAML flow collections become
// JSON arrays and objects first) and for JSON. One message for all, at the line the document starts on.
func tooDeep() error {
	return fmt.Errorf("not a Kubernetes object: mappings and lists nest more than %d levels deep, which the API server does not decode", maxDepth)
}

var yamlDepthError = regexp.MustCompile(`^yaml: line \d+: exceeded max depth of \d+`)

// yamlTooDeep reports whether err is the YAML parser's error of a document nested too deep.
func yamlTooDeep(err error) bool {
	return yamlDepthError.MatchString(err.Error())
}

// jsonTooDeep reports whether err is the JSON decoder's error of a value nested too deep (a SyntaxError,
// which the unstructured decoder passes on as text only).
func jsonTooDeep(err error) bool {
	return strings.HasSuffix(err.Error(), "exceeded max depth")
}

// objectError explains why a document is not a Kubernetes object.
func objectError(err error, data []byte) error {
	if jsonTooDeep(err) {
		return tooDeep()
	}
	var m map[string]any
	if json.Unmarshal(data, &m) != nil {
		return fmt.Errorf("not a Kubernetes object: a document must be a mapping, not %s", describe(data))
	}
	switch {
	case m["apiVersion"] == nil && m["kind"] == nil:
		return errors.New("not a Kubernetes object: apiVersion and kind are not set")
	case m["kind"] == nil:
		return errors.New("not a Kubernetes object: kind is not set")
	case m["apiVersion"] == nil:
		return errors.New("not a Kubernetes object: apiVersion is not set")
	}
	return fmt.Errorf("not a Kubernetes object: %w", err)
}

func describe(data []byte) string {
	switch t := bytes.TrimSpace(data); {
	case len(t) == 0:
		return "nothing"
	case t[0] == '[':
		return "a list"
	case t[0] == '"':
		return "a string"
	}
	return "a scalar"
}

// maxExpandedBytes bounds the JSON that a YAML document with aliases may expand to. The YAML parser refuses
// documents made mostly of aliases (the billion laughs), but not a few aliases of a large value: 200 aliases
// of a 1 MiB string are 1 MiB of YAML and 200 MiB of JSON, and as much again once decoded. The API server
// accepts request bodies of at most 3 MiB; a document that expands past more than twice that can never be
// applied, and is refused before it is converted.
const maxExpandedBytes = 8 << 20

// expandsTooFar reports whether the aliases of the YAML document doc expand it past maxExpandedBytes of JSON.
// Only a document with a '*' can hold an alias; its parsed form shares the aliased strings, so measuring it
// costs what parsing it does, not what expanding it would. A document that does not parse is left to the
// conversion, which reports why.
func expandsTooFar(doc []byte) bool {
	if bytes.IndexByte(doc, '*') < 0 {
		return false
	}
	var tree any
	if err := yamlv2.Unmarshal(doc, &tree); err != nil {
		return false
	}
	return expandedSize(tree, maxExpandedBytes) > maxExpandedBytes
}

// expandedSize estimates the bytes of v's JSON encoding, and stops counting once it passes limit.
func expandedSize(v any, limit int) int {
	switch t := v.(type) {
	case string:
		return len(t) + 2
	case map[any]any:
		n := 2
		for k, e := range t {
			n += expandedSize(k, limit) + 2 + expandedSize(e, limit-n)
			if n > limit {
				return n
			}
		}
		return n
	case []any:
		n := 2
		for _, e := range t {
			n += 1 + expandedSize(e, limit-n)
			if n > limit {
				return n
			}
		}
		return n
	}
	return 8 // a number, a boolean or null
}

func tooExpanded() error {
	return fmt.Errorf("YAML aliases expand the document to more than %d MiB of JSON, more than twice what the API server accepts in a request", maxExpandedBytes>>20)
}
