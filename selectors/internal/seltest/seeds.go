package seltest

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// root is the directory of package selectors, whatever package's test runs.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// SeedsDir is selectors/testdata/seeds: the seed manifests, verbatim where the seeds are
// manifests. The tests of every selectors package read them.
func SeedsDir() string { return filepath.Join(root(), "testdata", "seeds") }

// WorkloadsDir is examples/deploy/workloads: the reconstructed seed workloads.
func WorkloadsDir() string { return filepath.Join(root(), "..", "examples", "deploy", "workloads") }

// SeedFiles are the seed manifests (SeedsDir) and the reconstructed seed workloads
// (WorkloadsDir).
func SeedFiles(t testing.TB) []string {
	t.Helper()
	var files []string
	for _, pat := range []string{filepath.Join(SeedsDir(), "*.yaml"), filepath.Join(WorkloadsDir(), "*.yaml")} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 40 {
		t.Fatalf("found %d seed files", len(files))
	}
	return files
}

// CELExpressions returns every cel.expression of a manifest, whatever its apiVersion, by
// walking the YAML.
func CELExpressions(t testing.TB, data []byte) []string {
	t.Helper()
	var out []string
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
	for {
		var doc any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		var walk func(v any, underCEL bool)
		walk = func(v any, underCEL bool) {
			switch x := v.(type) {
			case map[string]any:
				for k, e := range x {
					if underCEL && k == "expression" {
						if s, ok := e.(string); ok {
							out = append(out, s)
						}
					}
					walk(e, k == "cel")
				}
			case []any:
				for _, e := range x {
					walk(e, false)
				}
			}
		}
		walk(doc, false)
	}
	return out
}
