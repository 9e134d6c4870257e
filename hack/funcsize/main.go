// Command funcsize fails when a function of the repository is too long or too complex to read:
// more than -max-lines lines (default 80, from "func" to the closing brace) or a cyclomatic
// complexity above -max-complexity (default 20). Complexity is counted as gocyclo v0.6.0 counts
// it: 1, plus one per if, for, range, non-default case and select case, && and ||, function
// literals included in the function that contains them.
//
// Tests (_test.go), generated files (a "Code generated ... DO NOT EDIT." header), testdata and
// hidden directories are skipped. Nested modules (test/e2e) are walked like the rest: their
// framework and commands are code people read and change as much as the library's.
//
// Usage: go run ./hack/funcsize [-max-lines 80] [-max-complexity 20] [dir ...]
// (default: the current directory). It prints one line per offender and exits 1 when there is one.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	maxLines := flag.Int("max-lines", 80, "longest function allowed, in lines")
	maxComplexity := flag.Int("max-complexity", 20, "highest cyclomatic complexity allowed")
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	var offenders []string
	for _, dir := range dirs {
		found, err := check(dir, *maxLines, *maxComplexity)
		if err != nil {
			fmt.Fprintln(os.Stderr, "funcsize:", err)
			os.Exit(2)
		}
		offenders = append(offenders, found...)
	}
	for _, o := range offenders {
		fmt.Println(o)
	}
	if len(offenders) > 0 {
		fmt.Printf("funcsize: %d function(s) over %d lines or complexity %d: split them into steps\n",
			len(offenders), *maxLines, *maxComplexity)
		os.Exit(1)
	}
}

// check returns one line per function under dir over the limits.
func check(dir string, maxLines, maxComplexity int) ([]string, error) {
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if path != dir && (strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata" || e.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		out = append(out, offenders(fset, f, maxLines, maxComplexity)...)
		return nil
	})
	return out, err
}

// offenders returns one line per function of f over the limits.
func offenders(fset *token.FileSet, f *ast.File, maxLines, maxComplexity int) []string {
	var out []string
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
		lines := end.Line - start.Line + 1
		cc := complexity(fn)
		var why []string
		if lines > maxLines {
			why = append(why, fmt.Sprintf("%d lines (max %d)", lines, maxLines))
		}
		if cc > maxComplexity {
			why = append(why, fmt.Sprintf("complexity %d (max %d)", cc, maxComplexity))
		}
		if len(why) > 0 {
			out = append(out, fmt.Sprintf("%s:%d: %s %s: %s", start.Filename, start.Line, f.Name.Name, funcName(fn), strings.Join(why, ", ")))
		}
	}
	return out
}

// funcName is "F" or "(*T).M", as gocyclo prints it.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	return "(" + recvType(fn.Recv.List[0].Type) + ")." + fn.Name.Name
}

func recvType(x ast.Expr) string {
	switch t := x.(type) {
	case *ast.StarExpr:
		return "*" + recvType(t.X)
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.IndexListExpr:
		return recvType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// complexity is gocyclo v0.6.0's cyclomatic complexity of fn.
func complexity(fn *ast.FuncDecl) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}
