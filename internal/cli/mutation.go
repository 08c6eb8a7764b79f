package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/mutate"
)

// The operations of the patches mutate.Diff produces (RFC 6902).
const (
	patchAdd     = "add"
	patchRemove  = "remove"
	patchReplace = "replace"
)

// applyPatch returns a copy of content with ops applied. Applied to the object the patch was computed from
// (a stored object), it is RFC 6902's add, remove and replace. It is lenient where a manifest lacks what the
// API server's defaults put in the object the patch was computed from (kubectl celaudit check --mutate): a
// replace of a missing member adds it, missing parent objects are created, and a removal of something
// missing does nothing. Other mismatches (a path through a scalar, an index out of range) are errors.
func applyPatch(content map[string]any, ops []mutate.Operation) (map[string]any, error) {
	var doc any = runtime.DeepCopyJSON(content)
	for _, op := range ops {
		var segs []string
		if op.Path != "" {
			for _, s := range strings.Split(strings.TrimPrefix(op.Path, "/"), "/") {
				segs = append(segs, strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~"))
			}
		}
		var err error
		if doc, err = applyAt(doc, segs, op); err != nil {
			return nil, fmt.Errorf("applying %s %s: %w", op.Op, op.Path, err)
		}
	}
	out, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the patch does not leave an object")
	}
	return out, nil
}

// applyAt applies op at segs below node and returns the node as it is after.
func applyAt(node any, segs []string, op mutate.Operation) (any, error) {
	if len(segs) == 0 {
		if op.Op == patchRemove {
			return nil, nil
		}
		return runtime.DeepCopyJSONValue(op.Value), nil
	}
	switch n := node.(type) {
	case map[string]any:
		return applyInMap(n, segs, op)
	case []any:
		return applyInList(n, segs, op)
	case nil:
		if op.Op == patchRemove {
			return nil, nil
		}
		return applyInMap(map[string]any{}, segs, op)
	}
	return nil, fmt.Errorf("%q is below a value that is neither an object nor a list", segs[0])
}

// applyInMap applies op at segs below the object n.
func applyInMap(n map[string]any, segs []string, op mutate.Operation) (any, error) {
	seg, rest := segs[0], segs[1:]
	child, ok := n[seg]
	if len(rest) == 0 {
		if op.Op == patchRemove {
			delete(n, seg)
		} else {
			n[seg] = runtime.DeepCopyJSONValue(op.Value)
		}
		return n, nil
	}
	if !ok {
		if op.Op == patchRemove {
			return n, nil
		}
		child = map[string]any{}
	}
	next, err := applyAt(child, rest, op)
	if err != nil {
		return nil, err
	}
	n[seg] = next
	return n, nil
}

// applyInList applies op at segs below the list n.
func applyInList(n []any, segs []string, op mutate.Operation) (any, error) {
	seg, rest := segs[0], segs[1:]
	i, err := strconv.Atoi(seg)
	if seg == "-" {
		i, err = len(n), nil
	}
	if err != nil || i < 0 || i > len(n) || (i == len(n) && (len(rest) > 0 || op.Op != patchAdd)) {
		if op.Op == patchRemove {
			return n, nil
		}
		return nil, fmt.Errorf("no element %q in a list of %d", seg, len(n))
	}
	if len(rest) > 0 {
		if n[i], err = applyAt(n[i], rest, op); err != nil {
			return nil, err
		}
		return n, nil
	}
	switch op.Op {
	case patchAdd:
		n = append(n[:i], append([]any{runtime.DeepCopyJSONValue(op.Value)}, n[i:]...)...)
	case patchReplace:
		n[i] = runtime.DeepCopyJSONValue(op.Value)
	case patchRemove:
		n = append(n[:i], n[i+1:]...)
	}
	return n, nil
}

// diffName names an object in a diff's headers as kubectl diff does: group.version.Kind.namespace.name.
func diffName(obj *unstructured.Unstructured) string {
	parts := []string{strings.ReplaceAll(obj.GetAPIVersion(), "/", "."), obj.GetKind()}
	if obj.GetNamespace() != "" {
		parts = append(parts, obj.GetNamespace())
	}
	return strings.Join(append(parts, obj.GetName()), ".")
}

// printMutationDiff prints, as kubectl diff does, the unified diff of the YAML of stored against the object
// patch leaves of it. managedFields are left out of both, as kubectl diff leaves them out. In a Secret, whose
// values are redacted in stored and patch alike, a value the patch replaces is shown as replaced.
func printMutationDiff(w io.Writer, stored *unstructured.Unstructured, patch []mutate.Operation) error {
	if isSecretObject(stored) {
		patch = markReplacedSecretValues(patch)
	}
	before, after, err := mutatedObject(stored, patch)
	if err != nil {
		return err
	}
	a, err := yaml.Marshal(before)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", diffName(stored), err)
	}
	b, err := yaml.Marshal(after)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", diffName(stored), err)
	}
	name := diffName(stored)
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		// SplitLines would add an empty last line to text that ends with a line break.
		A: difflib.SplitLines(strings.TrimSuffix(string(a), "\n")), B: difflib.SplitLines(strings.TrimSuffix(string(b), "\n")),
		FromFile: "LIVE/" + name, ToFile: "MERGED/" + name, Context: 3,
	})
	if err != nil {
		return fmt.Errorf("comparing %s: %w", name, err)
	}
	if text == "" {
		return nil
	}
	_, err = fmt.Fprintf(w, "diff -u -N LIVE/%s MERGED/%s\n%s", name, name, text)
	return err
}

// mutatedObject returns the stored object and the object patch leaves of it, both without managedFields.
func mutatedObject(stored *unstructured.Unstructured, patch []mutate.Operation) (before, after map[string]any, err error) {
	after, err = applyPatch(stored.Object, patch)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", diffName(stored), err)
	}
	before = runtime.DeepCopyJSON(stored.Object)
	for _, content := range []map[string]any{before, after} {
		unstructured.RemoveNestedField(content, "metadata", "managedFields")
	}
	return before, after, nil
}

func isSecretObject(obj *unstructured.Unstructured) bool {
	return obj.GetAPIVersion() == "v1" && obj.GetKind() == "Secret"
}

// changedSecretValue replaces, in a Secret's diff, a value that the patch replaces: both sides are redacted,
// and the diff would otherwise not show the change.
const changedSecretValue = audit.RedactionMarker + " (changed)"

// markReplacedSecretValues returns patch with the values it replaces under a Secret's data and stringData
// shown as changedSecretValue.
func markReplacedSecretValues(patch []mutate.Operation) []mutate.Operation {
	out := make([]mutate.Operation, len(patch))
	for i, op := range patch {
		out[i] = op
		if op.Op == patchReplace && (strings.HasPrefix(op.Path, "/data/") || strings.HasPrefix(op.Path, "/stringData/")) {
			out[i].Value = changedSecretValue
		}
	}
	return out
}

// printMutated prints the objects of -f, in input order, as the MutatingAdmissionPolicies would leave them
// (the others as they are), as multi-document YAML on standard output, and the results table on standard
// error. A Secret's values are never printed from a patch (the engine redacts them): the changes a Secret's
// patch makes to its data are left out, and noted.
func (o *checkOptions) printMutated(in *checkInputs, rs *ruleSet, t *tally, list []audit.Verdict) error {
	changed := 0
	first := true
	err := in.each(nil, func(r record) error {
		obj, err := r.decode()
		if err != nil {
			return BadInput("%w", err)
		}
		if patch := t.mutations[r.seq]; len(patch) > 0 {
			if isSecretObject(obj) {
				var withheld bool
				if patch, withheld = withoutSecretValues(patch); withheld {
					fmt.Fprintf(o.streams.ErrOut, "note: %s: Secret %s: the changes to its values are left out: celaudit never prints Secret data\n",
						r.src, obj.GetName())
				}
			}
			content, err := applyPatch(obj.Object, patch)
			if err != nil {
				return BadInput("%s: %s %s: %w", r.src, obj.GetKind(), obj.GetName(), err)
			}
			obj.Object = content
			changed++
		}
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			return fmt.Errorf("%s: encoding %s %s: %w", r.src, obj.GetKind(), obj.GetName(), err)
		}
		if !first {
			if _, err := io.WriteString(o.streams.Out, "---\n"); err != nil {
				return err
			}
		}
		first = false
		_, err = o.streams.Out.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	if err := printCheckTable(o.streams.ErrOut, rs, t, list); err != nil {
		return err
	}
	_, err = fmt.Fprintf(o.streams.ErrOut, "%d objects changed by MutatingAdmissionPolicies.\n", changed)
	return err
}

// withoutSecretValues returns a Secret's patch without the operations that carry its values (under data and
// stringData, or redacted anywhere), and whether it left some out.
func withoutSecretValues(patch []mutate.Operation) ([]mutate.Operation, bool) {
	out := make([]mutate.Operation, 0, len(patch))
	for _, op := range patch {
		sensitive := op.Path == "/data" || op.Path == "/stringData" ||
			strings.HasPrefix(op.Path, "/data/") || strings.HasPrefix(op.Path, "/stringData/") ||
			strings.Contains(mustJSON(op.Value), audit.RedactionMarker)
		if !sensitive {
			out = append(out, op)
		}
	}
	return out, len(out) < len(patch)
}

// mustJSON returns v as JSON, or "" when it has none.
func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}
