package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// heavyDeps are packages the driver binary must not link, each with why: every process of the
// binary, `serve` on every GPU node included, pays for their code, type data and package
// initialization in resident memory (issue 33, docs/benchmarks.md).
var heavyDeps = map[string]string{
	"k8s.io/client-go/kubernetes/fake": "a typed fake of every API group (about 6 MB of code) and a second scheme of every group built at start: demo uses demoClient",
	"k8s.io/client-go/informers":       "the shared-informer factory links the informer and lister of every API group: build the one informer needed",
}

// TestBinaryDependencies: the binary links none of heavyDeps; a failure names the package, why
// it is kept out, and the import chain that brought it in.
func TestBinaryDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	importedBy := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, dep := range f[1:] {
			if _, seen := importedBy[dep]; !seen {
				importedBy[dep] = f[0]
			}
		}
	}
	for pkg, why := range heavyDeps {
		if _, linked := importedBy[pkg]; !linked {
			continue
		}
		chain := []string{pkg}
		for p := importedBy[pkg]; p != "" && len(chain) < 50; p = importedBy[p] {
			chain = append([]string{p}, chain...)
		}
		t.Errorf("the driver binary links %s (%s): %s", pkg, why, strings.Join(chain, " imports "))
	}
}
