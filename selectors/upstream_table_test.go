package selectors_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apiserver/pkg/cel/environment"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpudra/gpudra/selectors"
)

// upstreamCELCase is one entry of the test table of k8s.io/dynamic-resource-allocation/cel
// (compile_test.go, the version go.mod pins), the fields TestCEL reads.
type upstreamCELCase struct {
	name                     string
	envType                  *environment.Type
	features                 *dracel.Features
	expression               string
	driver                   string
	allowMultipleAllocations *bool
	attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	capacity                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
	expectCompileError       string
	expectMatchError         string
	expectMatch              bool
	expectCost               uint64
}

// upstreamCELTable is set by the file TestUpstreamCELTable generates from upstream's table and
// adds to this package with go test -overlay; it is nil in an ordinary run.
var upstreamCELTable func() []upstreamCELCase

// upstreamCELFields are the fields of upstream's table that upstreamCELCase carries. A field
// upstream adds may change what a case means: the test fails until it is looked at.
var upstreamCELFields = []string{"allowMultipleAllocations", "attributes", "capacity", "driver", "envType",
	"expectCompileError", "expectCost", "expectMatch", "expectMatchError", "expression", "features"}

// TestUpstreamCELTable runs upstream's own CEL test table (the cases of TestCEL in
// k8s.io/dynamic-resource-allocation/cel, read from the module cache at the pinned version, never
// copied into this repository) through Compile, CompileStored, NewDevice and Matches, with every
// combination of features and environments TestCEL uses: selectors must accept and reject what
// upstream does, estimate the same cost, and evaluate to the same result or error. Our device
// conversion is our own (it converts once per device, not per evaluation); this is the proof that
// it agrees with upstream's.
//
// The table is compiled into this package through go test -overlay in a child go test, so the
// first run after a change pays one more compilation of the package.
func TestUpstreamCELTable(t *testing.T) {
	if upstreamCELTable != nil {
		runUpstreamCELTable(t, upstreamCELTable())
		return
	}
	if testing.Short() {
		t.Skip("compiles the package again with upstream's table (-short)")
	}
	src := generateUpstreamCELTable(t)
	dir := t.TempDir()
	gen := filepath.Join(dir, "zz_upstream_cel_table_test.go")
	if err := os.WriteFile(gen, src, 0o600); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(wd, "zz_upstream_cel_table_test.go"): gen}})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "go", "test", "-count=1", "-overlay", overlayFile, "-run", "^TestUpstreamCELTable$", "-v", ".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test with upstream's table: %v\n%s", err, out)
	}
	passed := strings.Count(string(out), "--- PASS: TestUpstreamCELTable/")
	if passed == 0 {
		t.Fatalf("the child ran no case of upstream's table:\n%s", out)
	}
	t.Logf("upstream's table: %d cases passed", passed)
}

// runUpstreamCELTable is TestCEL's loop with selectors in place of the upstream compiler.
func runUpstreamCELTable(t *testing.T, cases []upstreamCELCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			listType, consumable := []bool{true, false}, []bool{true, false}
			if tc.features != nil {
				listType, consumable = []bool{tc.features.EnableListTypeAttributes}, []bool{tc.features.EnableConsumableCapacity}
			}
			envTypes := []environment.Type{environment.NewExpressions, environment.StoredExpressions}
			if tc.envType != nil {
				envTypes = []environment.Type{*tc.envType}
			}
			for _, lt := range listType {
				for _, cc := range consumable {
					for _, env := range envTypes {
						f := dracel.Features{EnableListTypeAttributes: lt, EnableConsumableCapacity: cc}
						if msg := runUpstreamCELCase(tc, f, env); msg != "" {
							t.Errorf("list-type-attributes=%v consumable-capacity=%v %s: %s", lt, cc, env, msg)
						}
					}
				}
			}
		})
	}
}

// runUpstreamCELCase returns what selectors did differently from upstream's expectation, or "".
func runUpstreamCELCase(tc upstreamCELCase, f dracel.Features, env environment.Type) string {
	c := selectors.NewCompiler(selectors.WithCELFeatures(f))
	compile := c.Compile
	if env == environment.StoredExpressions {
		compile = c.CompileStored
	}
	sel, err := compile(tc.expression)
	if ce := selectors.AsCompileError(err); ce != nil && ce.Kind == selectors.ErrorTooExpensive && tc.expectCompileError == "" {
		// Upstream's compiler only estimates the cost; the API server refuses a new selector
		// over the limit, and so does Compile. Same estimate: agreed. The evaluation is then
		// checked as if the API server had taken it.
		if ce.Cost != tc.expectCost {
			return fmt.Sprintf("estimated cost %d, upstream %d", ce.Cost, tc.expectCost)
		}
		sel, err = selectors.NewCompiler(selectors.WithCELFeatures(f), selectors.WithCostLimit(math.MaxUint64)).Compile(tc.expression)
	}
	switch {
	case err != nil && tc.expectCompileError == "":
		return fmt.Sprintf("unexpected compile error: %v", err)
	case err != nil && tc.expectCompileError == "compilation failed":
		// Upstream's prefix of every error from CEL's checker, which CompileError replaces
		// with the checker's messages and their positions.
		if ce := selectors.AsCompileError(err); ce == nil || ce.Kind != selectors.ErrorInvalid {
			return fmt.Sprintf("compile error %v, want an ErrorInvalid *CompileError", err)
		}
		return ""
	case err != nil && !strings.Contains(err.Error(), tc.expectCompileError):
		return fmt.Sprintf("compile error %q does not contain upstream's %q", err, tc.expectCompileError)
	case err != nil:
		return ""
	case tc.expectCompileError != "":
		return fmt.Sprintf("compiled, upstream expects the error %q", tc.expectCompileError)
	}
	if env == environment.NewExpressions && sel.Cost != tc.expectCost {
		return fmt.Sprintf("estimated cost %d, upstream %d", sel.Cost, tc.expectCost)
	}
	dev := selectors.NewDevice(tc.driver, "pool", &resourceapi.Device{Name: "device",
		AllowMultipleAllocations: tc.allowMultipleAllocations, Attributes: tc.attributes, Capacity: tc.capacity})
	match, err := sel.Matches(context.Background(), dev)
	switch {
	case err != nil && tc.expectMatchError == "":
		return fmt.Sprintf("unexpected evaluation error: %v", err)
	case err != nil && !strings.Contains(err.Error(), tc.expectMatchError):
		return fmt.Sprintf("evaluation error %q does not contain upstream's %q", err, tc.expectMatchError)
	case err != nil:
		return ""
	case tc.expectMatchError != "":
		return fmt.Sprintf("evaluated to %v, upstream expects the error %q", match, tc.expectMatchError)
	case match != tc.expectMatch:
		return fmt.Sprintf("evaluated to %v, upstream %v", match, tc.expectMatch)
	}
	return ""
}

// generateUpstreamCELTable writes a test file of this package that holds upstream's table (its
// testcases variable and the constants it uses, with the package's Features type qualified) and
// hands it to runUpstreamCELTable.
func generateUpstreamCELTable(t *testing.T) []byte {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/dynamic-resource-allocation").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/dynamic-resource-allocation: %v", err)
	}
	file := filepath.Join(strings.TrimSpace(string(out)), "cel", "compile_test.go")
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("upstream's table: %v", err)
	}
	var decls []ast.Decl
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && (g.Tok == token.VAR || g.Tok == token.CONST) && declares(g, "testcases", "maxElementsListTypeEnabled") {
			decls = append(decls, g)
		}
	}
	if len(decls) != 2 {
		t.Fatalf("%s: found %d of the declarations testcases and maxElementsListTypeEnabled", file, len(decls))
	}
	checkUpstreamCELFields(t, file, decls)
	for _, d := range decls {
		ast.Inspect(d, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				ast.Inspect(sel.X, qualifyFeatures)
				return false
			}
			return qualifyFeatures(n)
		})
	}
	var body bytes.Buffer
	for _, d := range decls {
		if err := printer.Fprint(&body, fset, d); err != nil {
			t.Fatal(err)
		}
		body.WriteString("\n\n")
	}
	var src bytes.Buffer
	src.WriteString("// Code generated by TestUpstreamCELTable from " + file + ". DO NOT EDIT.\n\npackage selectors_test\n\nimport (\n")
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := filepath.Base(path)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		if bytes.Contains(body.Bytes(), []byte(name+".")) {
			fmt.Fprintf(&src, "\t%s %q\n", name, path)
		}
	}
	src.WriteString("\tdracel \"k8s.io/dynamic-resource-allocation/cel\"\n)\n\n")
	src.Write(body.Bytes())
	src.WriteString(`func init() {
	upstreamCELTable = func() []upstreamCELCase {
		var out []upstreamCELCase
		for name, tc := range testcases {
			out = append(out, upstreamCELCase{name: name, envType: tc.envType, features: tc.features, expression: tc.expression,
				driver: tc.driver, allowMultipleAllocations: tc.allowMultipleAllocations, attributes: tc.attributes, capacity: tc.capacity,
				expectCompileError: tc.expectCompileError, expectMatchError: tc.expectMatchError, expectMatch: tc.expectMatch, expectCost: tc.expectCost})
		}
		return out
	}
}
`)
	return src.Bytes()
}

// checkUpstreamCELFields fails when upstream's table has other fields than upstreamCELFields.
func checkUpstreamCELFields(t *testing.T, file string, decls []ast.Decl) {
	t.Helper()
	var fields []string
	for _, d := range decls {
		ast.Inspect(d, func(n ast.Node) bool {
			if st, ok := n.(*ast.StructType); ok {
				for _, fl := range st.Fields.List {
					for _, n := range fl.Names {
						fields = append(fields, n.Name)
					}
				}
				return false
			}
			return true
		})
	}
	slices.Sort(fields)
	if diff := cmp.Diff(upstreamCELFields, fields); diff != "" {
		t.Fatalf("%s: the fields of upstream's table changed; review what they mean and update upstreamCELCase (-ours +upstream):\n%s", file, diff)
	}
}

// declares reports whether a declaration names one of the identifiers.
func declares(g *ast.GenDecl, names ...string) bool {
	for _, s := range g.Specs {
		if vs, ok := s.(*ast.ValueSpec); ok {
			for _, n := range vs.Names {
				if slices.Contains(names, n.Name) {
					return true
				}
			}
		}
	}
	return false
}

// qualifyFeatures renames upstream's package-local Features type to dracel.Features.
func qualifyFeatures(n ast.Node) bool {
	if id, ok := n.(*ast.Ident); ok && id.Name == "Features" {
		id.Name = "dracel.Features"
	}
	return true
}
