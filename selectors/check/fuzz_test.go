package check_test

import (
	"context"
	"os"
	"testing"

	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/check"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
)

// FuzzCheck: a manifest, however broken, never panics the Checker on a machine (decode,
// API-server findings, lint, simulated allocation): Check returns a report or an error.
func FuzzCheck(f *testing.F) {
	// A few seed files only: each Check compiles and allocates (about a second on 2 cores), so a
	// large corpus spends the fuzzing time on its baseline.
	files := seltest.SeedFiles(f)
	for _, file := range files[:min(4, len(files))] {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, count := range []string{"0", "-3", "33", "-9223372036854775808"} {
		f.Add([]byte("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec:\n  devices:\n    requests:\n" +
			"    - name: r\n      exactly: {deviceClassName: gpu.nvidia.com, count: " + count + "}\n"))
	}
	f.Add([]byte("apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: BAD}\n"))
	f.Add([]byte(""))
	slices := seltest.Machine{Name: "l4x8"}.Slices(f)
	compiler := selectors.NewCompiler()
	f.Fuzz(func(t *testing.T, data []byte) {
		c := check.NewChecker(check.WithCompiler(compiler), check.WithMachine("l4x8", slices))
		r, err := c.Check(context.Background(), "fuzz", data)
		if r == nil && err == nil {
			t.Fatal("no report and no error")
		}
	})
}
