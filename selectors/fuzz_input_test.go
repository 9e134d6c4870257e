package selectors_test

import (
	"context"
	"os"
	"testing"

	"github.com/gpudra/gpudra/selectors"
)

// FuzzCheck: a manifest, however broken, never panics the Checker on a machine (decode,
// API-server findings, lint, simulated allocation): Check returns a report or an error.
func FuzzCheck(f *testing.F) {
	// A few seed files only: each Check compiles and allocates (about a second on 2 cores), so a
	// large corpus spends the fuzzing time on its baseline.
	files := seedFiles(f)
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
	slices := machine{name: "l4x8"}.slices(f)
	compiler := selectors.NewCompiler()
	f.Fuzz(func(t *testing.T, data []byte) {
		c := selectors.NewChecker(selectors.WithCompiler(compiler), selectors.WithMachine("l4x8", slices))
		r, err := c.Check(context.Background(), "fuzz", data)
		if r == nil && err == nil {
			t.Fatal("no report and no error")
		}
	})
}

// FuzzParsePolicy: policy files never panic ParsePolicy, and an accepted policy evaluates a
// seed manifest without panic.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{
		"blockedMIGProfiles: ['7g.*']\n", "allowedMIGProfiles: ['1g.*', '2g.10gb']\nmaxGPUsPerClaim: 2\n",
		"requiredSharing: {default: TimeSlicing}\n", "blockedMigProfiles: [a]\n", "maxGPUsPerClaim: -1\n",
		"blockedMIGProfiles: ['[']\n", "", "{", "\x00",
	} {
		f.Add([]byte(s))
	}
	manifest, err := os.ReadFile("../examples/deploy/workloads/05-mig-1g.yaml")
	if err != nil {
		f.Fatal(err)
	}
	objs, _ := selectors.DecodeManifest(manifest)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := selectors.ParsePolicy(data)
		if err != nil {
			return
		}
		_ = p.Evaluate(context.Background(), objs, selectors.Environment{})
	})
}
