package gpudra_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// guidePath is the driver author's guide. Every Go code block in it is the body of an Example
// function that go test runs; TestDriverAuthorsGuide keeps the two identical.
const guidePath = "docs/driver-authors.md"

// updateGuide rewrites the guide's code blocks from the Example functions they name.
var updateGuide = flag.Bool("guide.update", false, "rewrite the Go code blocks of "+guidePath+" from the Examples they name")

// guideMarker introduces a Go code block of the guide: the line right before the fence names the
// Example function and links the _test.go file that holds it, relative to docs/. A marker ending
// in ", whole file:" shows the file from its first declaration after the imports: the types an
// Example uses (a Driver it implements) and the Example, as go doc shows a whole-file example.
var guideMarker = regexp.MustCompile("^Example `(Example\\w*)` in \\[([\\w./-]+_test\\.go)\\]\\(\\.\\./([\\w./-]+_test\\.go)\\)(, whole file)?:$")

// guideStep is a numbered step heading ("## 3. Title"); each step must show an Example.
var guideStep = regexp.MustCompile(`^## \d+\. `)

// guideBlock is one Go code block of the guide and the Example it claims to be.
type guideBlock struct {
	line    int    // line of the opening fence, 1-based
	end     int    // line of the closing fence
	file    string // the _test.go file, relative to the repository root
	example string // the Example function's name
	code    string // the block's content, lines joined with "\n", ending with "\n"
	whole   bool   // the block is the file after its imports, not the Example's body
}

// TestDriverAuthorsGuide checks that each Go code block of docs/driver-authors.md is, verbatim,
// the body (one tab of indentation removed) of the Example function its marker line names, that
// the Example has an output comment (so go test runs and checks it), and that every numbered step
// shows at least one Example. Editing either side alone fails here.
func TestDriverAuthorsGuide(t *testing.T) {
	data, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	blocks, errs := parseGuide(data)
	for _, err := range errs {
		t.Error(err)
	}
	if len(blocks) == 0 {
		t.Fatalf("%s has no Example code blocks", guidePath)
	}
	lines := strings.Split(string(data), "\n")
	for i := len(blocks) - 1; i >= 0; i-- { // from the end, so that earlier line numbers stay valid
		b := blocks[i]
		body, err := exampleBody(b.file, b.example, b.whole)
		if err != nil {
			t.Errorf("%s:%d: %v", guidePath, b.line, err)
			continue
		}
		if *updateGuide {
			lines = append(lines[:b.line], append(strings.Split(strings.TrimSuffix(body, "\n"), "\n"), lines[b.end-1:]...)...)
			continue
		}
		if diff := cmp.Diff(strings.Split(body, "\n"), strings.Split(b.code, "\n")); diff != "" {
			t.Errorf("%s:%d: the code block differs from the body of %s in %s; copy the body, one tab of indentation removed (-%s +guide):\n%s",
				guidePath, b.line, b.example, b.file, b.file, diff)
		}
	}
	if *updateGuide {
		if err := os.WriteFile(guidePath, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// parseGuide returns the guide's Go code blocks with their markers, and an error for every Go
// block without a marker, every marker not followed by a Go block, every unclosed block and every
// numbered step without an Example.
func parseGuide(data []byte) ([]guideBlock, []error) {
	var (
		blocks       []guideBlock
		errs         []error
		prev         string // the last non-blank line outside code blocks
		prevLine     int
		step         string // the current numbered step heading, "" outside steps
		stepLine     int
		stepExamples int
		cur          *guideBlock
		inOther      bool // inside a fenced block of another language
	)
	endStep := func() {
		if step != "" && stepExamples == 0 {
			errs = append(errs, fmt.Errorf("%s:%d: step %q shows no Example", guidePath, stepLine, step))
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if cur == nil && !inOther && prevLine == n-1 && guideMarker.MatchString(prev) && line != "```go" {
			errs = append(errs, fmt.Errorf("%s:%d: marker line not followed by a ```go block", guidePath, prevLine))
		}
		switch {
		case cur != nil:
			if line == "```" {
				cur.end = n
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			cur.code += line + "\n"
			continue
		case inOther:
			inOther = line != "```"
			continue
		case line == "```go":
			m := guideMarker.FindStringSubmatch(prev)
			if m == nil || prevLine != n-1 {
				errs = append(errs, fmt.Errorf("%s:%d: a Go code block must follow a line \"Example `ExampleName` in [file_test.go](../file_test.go):\"", guidePath, n))
				m = []string{"", "", "", "", ""}
			} else if m[2] != m[3] {
				errs = append(errs, fmt.Errorf("%s:%d: marker names %s but links ../%s", guidePath, n-1, m[2], m[3]))
			}
			cur = &guideBlock{line: n, file: m[2], example: m[1], whole: m[4] != ""}
			stepExamples++
			continue
		case strings.HasPrefix(line, "```"):
			inOther = true
			continue
		case strings.HasPrefix(line, "## "):
			endStep()
			step, stepLine, stepExamples = "", n, 0
			if guideStep.MatchString(line) {
				step = strings.TrimPrefix(line, "## ")
			}
		}
		if strings.TrimSpace(line) != "" {
			prev, prevLine = line, n
		}
	}
	endStep()
	if cur != nil || inOther {
		errs = append(errs, fmt.Errorf("%s: unclosed code block at the end", guidePath))
	}
	return blocks, errs
}

// exampleBody returns the body of the Example function name in file (relative to the repository
// root), between its braces, with one tab of indentation removed from every line; with whole,
// the file after its imports, which must be a whole-file example (go doc then shows the file).
// It fails when go test would not run the Example: not an Example, or no output comment.
func exampleBody(file, name string, whole bool) (string, error) {
	if name == "" {
		return "", fmt.Errorf("no Example named")
	}
	src, err := os.ReadFile(filepath.FromSlash(file))
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return "", err
	}
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if d, ok := d.(*ast.FuncDecl); ok && d.Recv == nil && d.Name.Name == name {
			fn = d
		}
	}
	if fn == nil {
		return "", fmt.Errorf("%s has no function %s", file, name)
	}
	runs := false
	for _, ex := range doc.Examples(f) {
		if "Example"+ex.Name == name {
			runs = ex.Output != "" || ex.EmptyOutput
		}
	}
	if !runs {
		return "", fmt.Errorf("%s in %s is not an Example with an output comment: go test would not run it", name, file)
	}
	if whole {
		if exs := doc.Examples(f); len(exs) != 1 || exs[0].Play == nil {
			return "", fmt.Errorf("%s is not a whole-file example (one Example, other declarations, no tests): go doc would show %s alone", file, name)
		}
		var after token.Pos
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
				after = g.End()
			}
		}
		return strings.TrimLeft(string(src[fset.Position(after).Offset:]), "\n"), nil
	}
	body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
	body = strings.TrimPrefix(body, "\n")
	lines := strings.Split(body, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	return strings.Join(lines, "\n"), nil
}

// TestDocLinks checks that the relative links of README.md and the driver author's guide point
// at files of the repository that exist: the documents a module user gets, never paths outside it.
func TestDocLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{"README.md", guidePath} {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			path := filepath.Join(filepath.Dir(doc), filepath.FromSlash(target))
			abs, err := filepath.Abs(path)
			if err != nil {
				t.Fatal(err)
			}
			if rel, err := filepath.Rel(root, abs); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				t.Errorf("%s links %s, outside the repository", doc, m[1])
				continue
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links %s: %v", doc, m[1], err)
			}
		}
	}
}

// TestGuideLineCount: the guide's size of the second driver ("The complete driver, N lines") is
// every line of examples/accel-dra-driver's non-test Go files, as wc -l counts them.
func TestGuideLineCount(t *testing.T) {
	data, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`The complete driver, (\d+) lines`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s does not say how many lines the second driver has", guidePath)
	}
	files, err := filepath.Glob("examples/accel-dra-driver/*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines += bytes.Count(src, []byte("\n"))
	}
	if got := fmt.Sprint(lines); got != string(m[1]) {
		t.Errorf("%s says the second driver has %s lines; its non-test Go files have %s", guidePath, m[1], got)
	}
}

// guideNoCgoSection is the guide's section for drivers of other devices: its examples must build
// without cgo, which `make nocgo` (part of `make test`) checks for the packages in NOCGO_PKGS.
const guideNoCgoSection = "## A driver for another kind of device"

// TestGuideNoCgoExamplesAreChecked checks that every Example the guide shows in its section for
// drivers of other devices is in a package that the Makefile's nocgo target builds and tests with
// CGO_ENABLED=0, and that `make test` runs that target.
func TestGuideNoCgoExamplesAreChecked(t *testing.T) {
	data, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^NOCGO_PKGS := (.+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile has no NOCGO_PKGS")
	}
	pkgs := strings.Fields(string(m[1]))
	if !regexp.MustCompile(`(?m)^test:.*\bnocgo\b`).Match(makefile) {
		t.Error("make test does not run the nocgo target")
	}
	covered := func(dir string) bool {
		for _, p := range pkgs {
			p = strings.TrimPrefix(p, "./")
			if rest, ok := strings.CutSuffix(p, "/..."); ok && (dir == rest || strings.HasPrefix(dir, rest+"/")) || dir == p {
				return true
			}
		}
		return false
	}
	start := strings.Index(string(data), "\n"+guideNoCgoSection+"\n")
	if start < 0 {
		t.Fatalf("%s has no section %q", guidePath, guideNoCgoSection)
	}
	startLine := strings.Count(string(data)[:start], "\n") + 2
	endLine := strings.Count(string(data), "\n") + 1
	if next := strings.Index(string(data)[start+1:], "\n## "); next >= 0 {
		endLine = strings.Count(string(data)[:start+1+next], "\n") + 1
	}
	blocks, _ := parseGuide(data)
	n := 0
	for _, b := range blocks {
		if b.line < startLine || b.line > endLine {
			continue
		}
		n++
		if dir := filepath.ToSlash(filepath.Dir(b.file)); !covered(dir) {
			t.Errorf("%s:%d: %s is in %s, which the Makefile's NOCGO_PKGS (%s) does not build with CGO_ENABLED=0",
				guidePath, b.line, b.example, dir, strings.Join(pkgs, " "))
		}
	}
	if n == 0 {
		t.Errorf("%s: section %q shows no Example", guidePath, guideNoCgoSection)
	}
}
