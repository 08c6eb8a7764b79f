package vap

import (
	"slices"
	"strings"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// Names the admission CEL environment binds.
const (
	celRequest    = "request"
	celUserInfo   = "userInfo"
	celAuthorizer = "authorizer"
	celVariables  = "variables"
	celNamespace  = "namespaceObject"
)

// userDependency finds, by inspecting parsed expressions, what of the requesting user an expression reads:
// request.userInfo (also as request["userInfo"] or request.?userInfo) and the authorizer, directly or through
// variables. A stored object has no requesting user, so such expressions cannot be judged.
type userDependency struct {
	env *celgo.Env
	// vars holds, per variable name, the user-dependent roots the variable reads (possibly through other
	// variables).
	vars map[string][]string
	// namespaceObject records whether any inspected expression reads namespaceObject.
	namespaceObject bool
}

func newUserDependency(env *celgo.Env, variables []admissionregistrationv1.Variable) *userDependency {
	d := &userDependency{env: env, vars: map[string][]string{}}
	for _, v := range variables {
		// Variables only see the variables declared before them, so one pass in order resolves chains.
		roots, refs := d.inspect(v.Expression)
		for _, ref := range refs {
			roots = append(roots, d.vars[ref]...)
		}
		slices.Sort(roots)
		d.vars[v.Name] = slices.Compact(roots)
	}
	return d
}

// reason explains why expression depends on the requesting user, e.g. "request.userInfo" or "authorizer via
// variables.allowed"; "" when it does not. Unparsable expressions are not inspected: compiling them fails and
// that error is reported instead.
func (d *userDependency) reason(expression string) string {
	roots, refs := d.inspect(expression)
	for _, ref := range refs {
		for _, root := range d.vars[ref] {
			roots = append(roots, root+" via "+celVariables+"."+ref)
		}
	}
	slices.Sort(roots)
	return strings.Join(slices.Compact(roots), ", ")
}

// inspect returns the user-dependent roots expression reads directly and the variables it references.
func (d *userDependency) inspect(expression string) (roots, variableRefs []string) {
	if d.env == nil {
		return nil, nil
	}
	parsed, iss := d.env.Parse(expression)
	if iss.Err() != nil || parsed == nil {
		return nil, nil
	}
	ast.PreOrderVisit(parsed.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.IdentKind:
			switch e.AsIdent() {
			case celAuthorizer:
				roots = append(roots, celAuthorizer)
			case celNamespace:
				d.namespaceObject = true
			}
		case ast.SelectKind:
			sel := e.AsSelect()
			roots, variableRefs = d.field(sel.Operand(), sel.FieldName(), roots, variableRefs)
		case ast.CallKind:
			call := e.AsCall()
			switch call.FunctionName() {
			case operators.Index, operators.OptIndex, operators.OptSelect:
				if args := call.Args(); len(args) == 2 && args[1].Kind() == ast.LiteralKind {
					if name, ok := args[1].AsLiteral().(types.String); ok {
						roots, variableRefs = d.field(args[0], string(name), roots, variableRefs)
					}
				}
			}
		}
	}))
	return roots, variableRefs
}

// field records the access of field on operand.
func (d *userDependency) field(operand ast.Expr, field string, roots, variableRefs []string) ([]string, []string) {
	if operand.Kind() != ast.IdentKind {
		return roots, variableRefs
	}
	switch operand.AsIdent() {
	case celRequest:
		if field == celUserInfo {
			roots = append(roots, celRequest+"."+celUserInfo)
		}
	case celVariables:
		variableRefs = append(variableRefs, field)
	}
	return roots, variableRefs
}
