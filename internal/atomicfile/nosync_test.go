package atomicfile_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// syncCalls are the package-level functions that flush to stable storage.
var syncCalls = map[string][]string{
	"unix":    {"Fsync", "Fdatasync", "Sync", "Syncfs", "SyncFileRange", "Msync"},
	"syscall": {"Fsync", "Fdatasync", "Sync", "SyncFileRange", "Msync"},
}

// TestOnlyAtomicfileSyncs scans the module's code (tests excepted) for fsyncs made anywhere but
// in this package: (*os.File).Sync and the unix/syscall sync calls. Every fsync must go through a
// Files and its Syncer, where each write states what it must survive and tests count what the
// hot path pays; a sync added elsewhere would bypass both.
func TestOnlyAtomicfileSyncs(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	allowed := filepath.Join(root, "internal", "atomicfile", "atomicfile.go")
	var found []string
	fset := token.NewFileSet()
	scanned := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || isModule(path)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == allowed {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		scanned++
		for _, pos := range syncsIn(f) {
			p := fset.Position(pos)
			rel, _ := filepath.Rel(root, p.Filename)
			found = append(found, rel+":"+strconv.Itoa(p.Line))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if scanned < 50 {
		t.Fatalf("scanned only %d files under %s: the walk is broken", scanned, root)
	}
	if len(found) > 0 {
		t.Errorf("fsync outside internal/atomicfile (use a Files with the Durability the write needs): %v", found)
	}
}

// isModule says whether dir holds another Go module (test/e2e), which this test does not cover.
func isModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// syncsIn returns the positions of the sync calls in f: x.Sync() with no arguments (the
// os.File method) and the calls of syncCalls through their package's import name.
func syncsIn(f *ast.File) []token.Pos {
	imported := map[string]string{} // local name -> "unix" or "syscall"
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		var pkg string
		switch path {
		case "golang.org/x/sys/unix":
			pkg = "unix"
		case "syscall":
			pkg = "syscall"
		default:
			continue
		}
		name := pkg
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imported[name] = pkg
	}
	var out []token.Pos
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if sel.Sel.Name == "Sync" && len(call.Args) == 0 {
			out = append(out, call.Pos())
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok {
			if pkg, ok := imported[x.Name]; ok && slices.Contains(syncCalls[pkg], sel.Sel.Name) {
				out = append(out, call.Pos())
			}
		}
		return true
	})
	return out
}
