package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/manifests"
)

// checkInputs are the manifests of one check, read once: the rule and context objects kept in memory, every
// object to judge spooled to a temporary file as one JSON line, so that a second pass (params, then the
// evaluation) reads cheap JSON rather than YAML, standard input included, and only a few objects per worker
// (a batch of parsed documents, a queue of spooled lines) are held at a time.
type checkInputs struct {
	// context holds the objects of --rules and, unless the rules come from a cluster, the CRDs, policies,
	// bindings, AuditPolicies and Namespaces of the manifests.
	context []manifests.Object
	// files names the files of the spooled objects, by index.
	files []string
	// kinds are the kinds of the spooled objects, by index, each with the first place it was seen.
	kinds     []schema.GroupVersionKind
	kindIndex map[schema.GroupVersionKind]int
	firstSeen []manifests.Source
	// ruleKinds are the kinds of objects of --rules, with where each was first seen.
	ruleKinds map[schema.GroupVersionKind]manifests.Source

	spool   *os.File
	objects int
}

// isContext reports whether a manifest is read as a rule or as context for rules: a policy object or a
// Namespace.
func isContext(obj *unstructured.Unstructured) bool {
	return engine.IsPolicyObject(obj) || obj.GroupVersionKind() == corev1.SchemeGroupVersion.WithKind("Namespace")
}

// isContextKind is isContext of an object of kind gvk.
func isContextKind(gvk schema.GroupVersionKind) bool {
	probe := &unstructured.Unstructured{Object: map[string]any{}}
	probe.SetGroupVersionKind(gvk)
	return isContext(probe)
}

// readInputs reads --rules into memory and spools the objects of -f.
func (o *checkOptions) readInputs() (_ *checkInputs, err error) {
	in := &checkInputs{kindIndex: map[schema.GroupVersionKind]int{}, ruleKinds: map[schema.GroupVersionKind]manifests.Source{}}
	reader := manifests.Reader{Stdin: o.streams.In, Workers: o.workers}
	if err := reader.Walk(o.rules, func(obj manifests.Object) error {
		in.context = append(in.context, obj)
		if _, seen := in.ruleKinds[obj.GroupVersionKind()]; !seen {
			in.ruleKinds[obj.GroupVersionKind()] = obj.Source
		}
		return nil
	}); err != nil {
		return nil, inputError(err)
	}

	if in.spool, err = os.CreateTemp("", "kubectl-celaudit-check-*.jsonl"); err != nil {
		return nil, fmt.Errorf("creating the spool file: %w", err)
	}
	defer func() {
		if err != nil {
			in.close()
		}
	}()
	w := bufio.NewWriterSize(in.spool, 1<<20)
	fileIndex := map[string]int{}
	var compact bytes.Buffer
	// The objects to judge are only spooled: their kind is all this pass reads of them, and their content is
	// decoded once, when they are judged. Rules among them are decoded here.
	reader.Undecoded = func(gvk schema.GroupVersionKind) bool { return o.cluster || !isContextKind(gvk) }
	err = reader.Walk(o.files, func(obj manifests.Object) error {
		if obj.Unstructured != nil && !o.cluster && isContext(obj.Unstructured) {
			in.context = append(in.context, obj)
		}
		f, ok := fileIndex[obj.Source.File]
		if !ok {
			f = len(in.files)
			fileIndex[obj.Source.File] = f
			in.files = append(in.files, obj.Source.File)
		}
		gvk := obj.GVK
		k, ok := in.kindIndex[gvk]
		if !ok {
			k = len(in.kinds)
			in.kindIndex[gvk] = k
			in.kinds = append(in.kinds, gvk)
			in.firstSeen = append(in.firstSeen, obj.Source)
		}
		data, err := spoolJSON(obj, &compact)
		if err != nil {
			return &manifests.Error{Source: obj.Source, Err: err}
		}
		in.objects++
		return writeRecord(w, f, obj.Source.Line, k, data)
	})
	if err != nil {
		return nil, inputError(err)
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("writing the spool file: %w", err)
	}
	return in, nil
}

func (in *checkInputs) close() {
	if in.spool != nil {
		_ = in.spool.Close()
		_ = os.Remove(in.spool.Name())
	}
}

// systemNamespaces are the namespaces the API server creates in every cluster.
func systemNamespaces() []string {
	return []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}
}

// contextObjects returns the context objects without their sources, after the namespaces every cluster has,
// so that a Namespace of the inputs with one of their names takes their place.
func (in *checkInputs) contextObjects() []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(in.context)+len(systemNamespaces()))
	for _, name := range systemNamespaces() {
		ns := &unstructured.Unstructured{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		ns.SetName(name)
		out = append(out, ns)
	}
	for _, o := range in.context {
		out = append(out, o.Unstructured)
	}
	return out
}

// spoolJSON returns the JSON of obj on one line: the JSON it was read from when there is one (YAML converts
// to compact JSON; a JSON document may need compacting), else obj encoded.
func spoolJSON(obj manifests.Object, compact *bytes.Buffer) ([]byte, error) {
	if obj.JSON == nil {
		return obj.MarshalJSON()
	}
	if bytes.IndexByte(obj.JSON, '\n') < 0 {
		return obj.JSON, nil
	}
	compact.Reset()
	if err := json.Compact(compact, obj.JSON); err != nil {
		return nil, err
	}
	return compact.Bytes(), nil
}

// record is one spooled object: where it was read, its kind, and its JSON.
type record struct {
	seq  int // order in the inputs
	src  manifests.Source
	kind schema.GroupVersionKind
	data []byte
}

// decode returns the record's object.
func (r record) decode() (*unstructured.Unstructured, error) {
	content := map[string]any{}
	// utiljson keeps integers int64, as the API machinery decodes them.
	if err := utiljson.Unmarshal(r.data, &content); err != nil {
		return nil, &manifests.Error{Source: r.src, Err: err}
	}
	return &unstructured.Unstructured{Object: content}, nil
}

// writeRecord writes "<file> <line> <kind> <json>\n"; compact JSON holds no line break.
func writeRecord(w *bufio.Writer, file, line, kind int, data []byte) error {
	var head [64]byte
	b := strconv.AppendInt(head[:0], int64(file), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(line), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(kind), 10)
	b = append(b, ' ')
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("writing the spool file: %w", err)
	}
	// The JSON encoder ends what it writes with a line break.
	if _, err := w.Write(bytes.TrimRight(data, "\n")); err != nil {
		return fmt.Errorf("writing the spool file: %w", err)
	}
	return w.WriteByte('\n')
}

// each calls visit with every spooled record, in input order, that keep accepts (nil keeps all); the data of
// a record is its own, visit may keep it. It stops at the first error visit returns.
func (in *checkInputs) each(keep func(schema.GroupVersionKind) bool, visit func(record) error) error {
	if _, err := in.spool.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("reading the spool file: %w", err)
	}
	r := bufio.NewReaderSize(in.spool, 1<<20)
	for seq := 0; ; seq++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the spool file: %w", err)
		}
		var fields [3]int
		rest := line
		for i := range fields {
			var field []byte
			field, rest, _ = bytes.Cut(rest, []byte{' '})
			if fields[i], err = strconv.Atoi(string(field)); err != nil {
				return fmt.Errorf("reading the spool file: %w", err)
			}
		}
		rec := record{seq: seq, src: manifests.Source{File: in.files[fields[0]], Line: fields[1]}, kind: in.kinds[fields[2]]}
		if keep != nil && !keep(rec.kind) {
			continue
		}
		rec.data = bytes.TrimSuffix(rest, []byte{'\n'})
		if err := visit(rec); err != nil {
			return err
		}
	}
}
