package selectors_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxExported is the most names one selectors package may export (issue 30): a package that
// needs more does more than one job.
const maxExported = 60

// coreForbidden are packages the core (what deviceplugin and draplugintest link for the
// builders and DeviceClasses) must not depend on: the scheduler's allocator and the simulator
// that runs it belong to selectors/check.
var coreForbidden = []string{
	"k8s.io/dynamic-resource-allocation/structured",
	"github.com/gpudra/gpudra/simulate",
}

// exportedNames lists what the non-test Go files of dir export: top-level funcs, types,
// consts and vars, and the exported methods of exported types.
func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					if d.Name.IsExported() {
						names = append(names, d.Name.Name)
					}
					continue
				}
				recv := d.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if g, ok := recv.(*ast.IndexExpr); ok { // generic receiver
					recv = g.X
				}
				if id, ok := recv.(*ast.Ident); ok && id.IsExported() && d.Name.IsExported() {
					names = append(names, id.Name+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names
}

// TestOneJobPerPackage enforces the layout of issue 30: no selectors package exports more than
// maxExported names.
func TestOneJobPerPackage(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() {
			if m, _ := filepath.Glob(filepath.Join(path, "*.go")); len(m) > 0 {
				dirs = append(dirs, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 6 {
		t.Fatalf("found only %d packages: %v", len(dirs), dirs)
	}
	for _, dir := range dirs {
		names := exportedNames(t, dir)
		t.Logf("selectors/%s: %d exported names", filepath.ToSlash(dir), len(names))
		if len(names) > maxExported {
			t.Errorf("selectors/%s exports %d names, more than %d: split it (%s)", filepath.ToSlash(dir), len(names), maxExported, strings.Join(names, " "))
		}
	}
}

// TestCoreDependencies: the core package does not link the allocator or the simulator.
func TestCoreDependencies(t *testing.T) {
	goTool := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Skipf("go list -deps: %v", err)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	if !deps["github.com/gpudra/gpudra/selectors"] {
		t.Fatalf("go list -deps . does not list the package itself:\n%s", out)
	}
	for _, p := range coreForbidden {
		if deps[p] {
			t.Errorf("package selectors depends on %s; keep the allocator in selectors/check", p)
		}
	}
}
