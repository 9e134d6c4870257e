package gpudra_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocComments holds the rule of docs/DESIGN ("every exported identifier has a doc
// comment") for every non-test package of the main module (nested modules such as test/e2e
// have their own go.mod and are left out): each exported function, method of an exported type,
// type, constant and variable, each exported field of an exported struct and each method of an
// exported interface has a comment of its own (a doc comment or a line comment). A constant or
// variable in a parenthesized block may share the block's doc comment, as go doc shows the block
// whole; a field may not share its neighbour's ("A and B are ..." above A leaves B without one
// in go doc's field list). Every offender is reported with its file and line.
func TestDocComments(t *testing.T) {
	offenders, err := undocumented(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offenders {
		t.Error(o)
	}
	if len(offenders) > 0 {
		t.Logf("%d exported names without a doc comment", len(offenders))
	}
}

// undocumented lists the exported names without a doc comment of the module rooted at root, as
// "file:line: kind name".
func undocumented(root string) ([]string, error) {
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // a nested module
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		out = append(out, undocumentedIn(fset, f)...)
		return nil
	})
	return out, err
}

func undocumentedIn(fset *token.FileSet, f *ast.File) []string {
	var out []string
	report := func(pos token.Pos, kind, name string) {
		p := fset.Position(pos)
		out = append(out, fmt.Sprintf("%s:%d: %s %s has no doc comment", filepath.ToSlash(p.Filename), p.Line, kind, name))
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || d.Doc != nil {
				continue
			}
			if d.Recv == nil {
				report(d.Pos(), "func", d.Name.Name)
			} else if recv := receiverType(d.Recv.List[0].Type); ast.IsExported(recv) {
				report(d.Pos(), "method", recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					if s.Doc == nil && s.Comment == nil && (d.Doc == nil || d.Lparen.IsValid()) {
						report(s.Pos(), "type", s.Name.Name)
					}
					out = append(out, undocumentedMembers(fset, s.Name.Name, s.Type)...)
				case *ast.ValueSpec:
					kind := "var"
					if d.Tok == token.CONST {
						kind = "const"
					}
					for _, n := range s.Names {
						if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
							report(n.Pos(), kind, n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// undocumentedMembers reports the exported fields of a struct type and the methods of an
// interface type (and those of the struct types nested in them) that have no comment.
func undocumentedMembers(fset *token.FileSet, owner string, typ ast.Expr) []string {
	var out []string
	var fields *ast.FieldList
	kind := "field"
	switch t := typ.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields, kind = t.Methods, "method"
	default:
		return nil
	}
	for _, field := range fields.List {
		names := field.Names
		if len(names) == 0 {
			continue // an embedded field or interface: documented where it is declared
		}
		for _, n := range names {
			if n.IsExported() && field.Doc == nil && field.Comment == nil {
				p := fset.Position(n.Pos())
				out = append(out, fmt.Sprintf("%s:%d: %s %s.%s has no doc comment", filepath.ToSlash(p.Filename), p.Line, kind, owner, n.Name))
			}
		}
		if st, ok := field.Type.(*ast.StructType); ok && len(names) > 0 && names[0].IsExported() {
			out = append(out, undocumentedMembers(fset, owner+"."+names[0].Name, st)...)
		}
	}
	return out
}

// receiverType is the name of a method's receiver type (T of T, *T, T[P]).
func receiverType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiverType(t.X)
	case *ast.IndexExpr:
		return receiverType(t.X)
	case *ast.IndexListExpr:
		return receiverType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}
