package gpudra_test

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// rootPackage is the import path of this package.
const rootPackage = "github.com/gpudra/gpudra"

// forbiddenRootDeps are the packages the root must not depend on, each with why: a controller,
// a cluster autoscaler's template or a scheduler simulation imports the root to publish or read
// slices, and must build with CGO_ENABLED=0, without a kubelet plugin's file writing (issue 30).
// A path ending in "/" forbids every package under it.
var forbiddenRootDeps = map[string]string{
	"github.com/NVIDIA/go-nvml/":                       "NVML's bindings need cgo (use gpu, mig and topology, not their nvml… subpackages)",
	rootPackage + "/cdi":                               "CDI specs are written by a kubelet plugin (draplugin maps published devices to them)",
	rootPackage + "/cdi/":                              "CDI specs are written by a kubelet plugin",
	rootPackage + "/internal/atomicfile":               "the root does no file I/O",
	rootPackage + "/gpu/nvmlgpu":                       "NVML enumeration needs cgo",
	rootPackage + "/mig/nvmlmig":                       "NVML MIG management needs cgo",
	rootPackage + "/topology/nvmltopology":             "NVML topology discovery needs cgo",
	"k8s.io/dynamic-resource-allocation/kubeletplugin": "the kubelet plugin belongs to draplugin",
}

// goTool returns the go command (go test puts its own GOROOT/bin first on the PATH).
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to check the root package's dependencies with: %v", err)
	}
	return p
}

// forbiddenWhy says why the root must not depend on pkg, "" when it may.
func forbiddenWhy(pkg string) string {
	for p, why := range forbiddenRootDeps {
		if pkg == p || strings.HasSuffix(p, "/") && strings.HasPrefix(pkg, p) {
			return why
		}
	}
	return ""
}

// importChain returns how the root reaches pkg, "root imports a imports … pkg", from the import
// lists of every dependency (a breadth-first search, so the chain is a shortest one).
func importChain(imports map[string][]string, pkg string) string {
	prev := map[string]string{rootPackage: ""}
	queue := []string{rootPackage}
	for len(queue) > 0 && prev[pkg] == "" {
		p := queue[0]
		queue = queue[1:]
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	chain := []string{pkg}
	for p := prev[pkg]; p != ""; p = prev[p] {
		chain = append(chain, p)
	}
	slices.Reverse(chain)
	return strings.Join(chain, " imports ")
}

// TestRootDependencies (issue 30, item 3): the root package depends on no NVML binding, no CDI
// writer and no kubelet plugin, so that a controller or an autoscaler can import it with
// CGO_ENABLED=0; a failure names the forbidden package and the import chain that reaches it.
func TestRootDependencies(t *testing.T) {
	cmd := exec.Command(goTool(t), "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps .: %v\n%s", err, stderr.Bytes())
	}
	imports := map[string][]string{}
	var deps []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		deps = append(deps, f[0])
		imports[f[0]] = f[1:]
	}
	if !slices.Contains(deps, rootPackage) || !slices.Contains(deps, rootPackage+"/gpu") {
		t.Fatalf("go list -deps . lists %d packages, not the root and its gpu dependency: is the test run in the root?", len(deps))
	}
	for _, d := range deps {
		if why := forbiddenWhy(d); why != "" {
			t.Errorf("the root package depends on %s: %s\n\t%s", d, why, importChain(imports, d))
		}
	}
}

// TestRootBuildsWithoutCgo builds the root package with CGO_ENABLED=0: any dependency that
// needs cgo, not only those TestRootDependencies names, fails it.
func TestRootBuildsWithoutCgo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the root package and its dependencies without cgo")
	}
	cmd := exec.Command(goTool(t), "build", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build .: %v\n%s", err, out)
	}
}
