package vap

import (
	"strings"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// Names of the admission CEL variables holding whole objects.
const (
	celObject    = "object"
	celOldObject = "oldObject"
	celParams    = "params"
)

// exposure is a set of inputs whose sensitive fields an expression may read. The sensitive fields of a Secret
// are data, stringData and metadata.annotations (kubectl's last-applied-configuration annotation holds a copy
// of the data).
type exposure uint8

const (
	// readsObject: the expression may read the sensitive fields of object or oldObject.
	readsObject exposure = 1 << iota
	// readsParams: the expression may read the sensitive fields of params. Tracked only when the policy's
	// paramKind is a Secret.
	readsParams
)

// secretReads decides, by inspecting parsed expressions, whether an expression may read the sensitive fields
// of a Secret it is given, directly or through variables. It must never answer "no" wrongly: what it cannot
// prove harmless counts as a read. It answers "yes" for
//   - object.data, object.stringData, object.metadata.annotations (and the same on oldObject, or params when
//     tracked) in every access form: select, optional select (.?data), index with a constant string
//     (["data"], [?"data"]) and has(), which discloses which keys exist;
//   - any other use of object or of object.metadata: passed whole to a function, compared, indexed with a
//     computed key, iterated by a comprehension or bound to a name (cel.bind) — the value could then be read
//     under another name;
//   - variables.NAME when the variable's expression is a read (transitively), and variables used whole.
//
// Other fields (object.type, object.metadata.name, object.metadata.labels...) are harmless: a Secret keeps
// nothing confidential there. An identifier that shadows a tracked one inside a comprehension is still taken
// for it, which errs on the safe side.
type secretReads struct {
	env *celgo.Env
	// roots maps each tracked identifier to the input it holds.
	roots map[string]exposure
	// vars holds, per variable name, what the variable's expression reads (transitively).
	vars map[string]exposure
	// allVars is the union of vars, for expressions that use the variables map whole.
	allVars exposure
	// all is every tracked input: the answer for what cannot be inspected.
	all exposure
}

func newSecretReads(env *celgo.Env, variables []admissionregistrationv1.Variable, paramsAreSecrets bool) *secretReads {
	s := &secretReads{
		env:   env,
		roots: map[string]exposure{celObject: readsObject, celOldObject: readsObject},
		vars:  map[string]exposure{},
		all:   readsObject,
	}
	if paramsAreSecrets {
		s.roots[celParams] = readsParams
		s.all |= readsParams
	}
	// A fixed point over every variable, rather than one pass in declaration order: it does not depend on
	// how the compiler scopes variables, and it terminates since exposures only grow within a finite set.
	direct := make([]readSet, len(variables))
	for i, v := range variables {
		direct[i] = s.inspect(v.Expression)
	}
	for changed := true; changed; {
		changed = false
		for i, v := range variables {
			reads := s.vars[v.Name] | s.resolve(direct[i])
			if reads != s.vars[v.Name] {
				s.vars[v.Name] = reads
				s.allVars |= reads
				changed = true
			}
		}
	}
	return s
}

// of returns what expression may read. Expressions that do not parse never run (compiling them fails and
// that error, which quotes only the policy, is reported), so they read nothing.
func (s *secretReads) of(expression string) exposure {
	if s.env == nil {
		return s.all
	}
	return s.resolve(s.inspect(expression))
}

// readSet is what one expression reads directly, and the variables it refers to.
type readSet struct {
	roots   exposure
	vars    []string
	allVars bool
}

func (s *secretReads) resolve(r readSet) exposure {
	reads := r.roots
	if r.allVars {
		reads |= s.allVars
	}
	for _, name := range r.vars {
		reads |= s.vars[name]
	}
	return reads
}

func (s *secretReads) inspect(expression string) readSet {
	var r readSet
	if s.env == nil {
		r.roots = s.all
		return r
	}
	parsed, iss := s.env.Parse(expression)
	if iss.Err() != nil || parsed == nil {
		return r
	}
	s.walk(parsed.NativeRep().Expr(), &r)
	return r
}

// walk records what e reads. A field access path (object.metadata.name) is judged whole, so that reading a
// harmless field is told apart from using the object.
func (s *secretReads) walk(e ast.Expr, r *readSet) {
	if root, fields, ok := accessPath(e); ok && len(fields) > 0 {
		s.access(root, fields, r)
		return
	}
	switch e.Kind() {
	case ast.IdentKind:
		name := strings.TrimPrefix(e.AsIdent(), ".")
		r.roots |= s.roots[name] // the whole object: anything in it may be read
		if name == celVariables {
			r.allVars = true
		}
	case ast.SelectKind:
		s.walk(e.AsSelect().Operand(), r)
	case ast.CallKind:
		call := e.AsCall()
		if call.IsMemberFunction() {
			s.walk(call.Target(), r)
		}
		for _, arg := range call.Args() {
			s.walk(arg, r)
		}
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		for _, part := range []ast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
			s.walk(part, r)
		}
	case ast.ListKind:
		for _, elem := range e.AsList().Elements() {
			s.walk(elem, r)
		}
	case ast.MapKind:
		for _, entry := range e.AsMap().Entries() {
			m := entry.AsMapEntry()
			s.walk(m.Key(), r)
			s.walk(m.Value(), r)
		}
	case ast.StructKind:
		for _, field := range e.AsStruct().Fields() {
			s.walk(field.AsStructField().Value(), r)
		}
	}
}

// access records the access of the field path fields (at least one) on the identifier root.
func (s *secretReads) access(root string, fields []string, r *readSet) {
	if root == celVariables {
		r.vars = append(r.vars, fields[0])
		return
	}
	input, tracked := s.roots[root]
	if !tracked {
		return
	}
	switch fields[0] {
	case "data", "stringData":
		r.roots |= input
	case "metadata":
		if len(fields) == 1 || fields[1] == "annotations" {
			r.roots |= input // metadata used whole, or its annotations
		}
	}
}

// accessPath returns the identifier and the field names e accesses when e is a chain of field accesses on an
// identifier: select (a.b, also has(a.b)), optional select (a.?b) and index with a constant string (a["b"],
// a[?"b"]). ok is false for anything else.
func accessPath(e ast.Expr) (root string, fields []string, ok bool) {
	for {
		switch e.Kind() {
		case ast.IdentKind:
			// fields were collected outermost first
			for i, j := 0, len(fields)-1; i < j; i, j = i+1, j-1 {
				fields[i], fields[j] = fields[j], fields[i]
			}
			return strings.TrimPrefix(e.AsIdent(), "."), fields, true
		case ast.SelectKind:
			sel := e.AsSelect()
			fields = append(fields, sel.FieldName())
			e = sel.Operand()
		case ast.CallKind:
			call := e.AsCall()
			switch call.FunctionName() {
			case operators.Index, operators.OptIndex, operators.OptSelect:
			default:
				return "", nil, false
			}
			args := call.Args()
			if call.IsMemberFunction() || len(args) != 2 || args[1].Kind() != ast.LiteralKind {
				return "", nil, false
			}
			name, isString := args[1].AsLiteral().(types.String)
			if !isString {
				return "", nil, false
			}
			fields = append(fields, string(name))
			e = args[0]
		default:
			return "", nil, false
		}
	}
}
