package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestReasonsDocumented holds reasons.go and README.md together: every Event reason declared has a row in the
// README's Events table and every row names declared reasons; every condition reason is named in the README.
func TestReasonsDocumented(t *testing.T) {
	events, conditions := declaredReasons(t)
	if len(events) < 10 || len(conditions) < 5 {
		t.Fatalf("reasons.go declares %d Event and %d condition reasons: its layout changed", len(events), len(conditions))
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	table := eventsTable(t, string(readme))
	for _, r := range events {
		if !slices.Contains(table, r) {
			t.Errorf("Event reason %s has no row in the README's Events table", r)
		}
	}
	for _, r := range table {
		if !slices.Contains(events, r) {
			t.Errorf("the README's Events table lists %s, which reasons.go does not declare as an Event reason", r)
		}
	}
	for _, r := range conditions {
		if !strings.Contains(string(readme), "`"+r+"`") {
			t.Errorf("condition reason %s is not named in the README", r)
		}
	}
}

// declaredReasons returns the values of the Reason constants of reasons.go: those of the block documented as
// Event reasons, and those of the other blocks. A constant defined as another package's constant (pkg.Name)
// takes that constant's value from internal/pkg.
func declaredReasons(t *testing.T) (events, conditions []string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "reasons.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		isEvents := g.Doc != nil && strings.HasPrefix(g.Doc.Text(), "Event reasons.")
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Reason") {
					continue
				}
				v := constantValue(t, vs.Values[i])
				if isEvents {
					events = append(events, v)
				} else {
					conditions = append(conditions, v)
				}
			}
		}
	}
	return events, conditions
}

// constantValue returns the string a constant's expression stands for: a literal, or pkg.Name, a constant of
// internal/pkg.
func constantValue(t *testing.T, e ast.Expr) string {
	t.Helper()
	switch e := e.(type) {
	case *ast.BasicLit:
		v, err := strconv.Unquote(e.Value)
		if err != nil {
			t.Fatal(err)
		}
		return v
	case *ast.SelectorExpr:
		pkg := e.X.(*ast.Ident).Name
		files, err := filepath.Glob(filepath.Join("..", "internal", pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if obj := f.Scope.Lookup(e.Sel.Name); obj != nil && obj.Kind == ast.Con {
				return constantValue(t, obj.Decl.(*ast.ValueSpec).Values[0])
			}
		}
		t.Fatalf("no constant %s.%s in internal/%s", pkg, e.Sel.Name, pkg)
	}
	t.Fatalf("reason defined by a %T", e)
	return ""
}

// eventsTable returns the reasons the first column of the README's Events table names.
func eventsTable(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n### Events\n")
	if !ok {
		t.Fatal("README.md has no Events section")
	}
	section, _, _ = strings.Cut(section, "\n#")
	code := regexp.MustCompile("`([A-Za-z]+)`")
	var out []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| `") || len(cells) < 2 {
			continue
		}
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			out = append(out, m[1])
		}
	}
	if len(out) == 0 {
		t.Fatal("the README's Events section has no table of reasons")
	}
	return out
}
