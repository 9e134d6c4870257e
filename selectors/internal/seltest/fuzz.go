package seltest

import (
	"os"
	"testing"
)

// FuzzExpressions are the seed corpus of FuzzCompile and FuzzLint: the evaluation test's
// expressions, every CEL expression of the seeds and workloads, and broken ones.
func FuzzExpressions(f *testing.F) []string {
	exprs := append([]string{}, EvalExpressions...)
	for _, file := range SeedFiles(f) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		exprs = append(exprs, CELExpressions(f, data)...)
	}
	return append(exprs,
		`device.attributes['memory'] >= 40000`,
		`device.attributes['gpu.nvidia.com'].profile in ['1g.5gb', 3]`,
		`device.capacity['gpu.nvidia.com'].memory == '40Gi'`,
		`!(device.attributes['gpu.nvidia.com'].driverVersion < '550')`,
		`device.attributes["gpu.nvidia.com"]["uuid"].startsWith("GPU-") ? true : false`,
		`[1,2,3].exists(x, x == device.attributes['gpu.nvidia.com'].index)`,
		`device.attributes[`, `)`, ``, `'\u00e9' == "é"`,
	)
}
