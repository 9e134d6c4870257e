package gpudra_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/internal/nilcheck"
)

// TestBuilderRejectsInvalidNames: the names the API server would reject in a ResourceSlice
// (spec.driver: a DNS subdomain of at most 63 characters, also the attribute domain;
// spec.pool.name: DNS subdomains separated by "/", at most 253 characters; spec.nodeName: a DNS
// subdomain) are errors of Build and ResourceSlices, not invalid objects.
func TestBuilderRejectsInvalidNames(t *testing.T) {
	inv := inventory(t, "l4x8")
	label63 := strings.Repeat("a", 63)
	cases := []struct {
		driver, pool, node string
		// wantBuild and wantSlices are the substring of the error of Build and of
		// ResourceSlices; "" means no error.
		wantBuild, wantSlices string
	}{
		{driver: "gpu.nvidia.com", pool: "node-1", node: "node-1"},
		{driver: "gpu.nvidia.com", pool: "worker.example.com", node: "worker.example.com"},
		{driver: "gpu.nvidia.com", pool: label63 + "." + label63 + "." + label63 + "." + strings.Repeat("a", 61), node: "n",
			wantSlices: "ResourceSlice name"}, // a valid 253-character pool; the object name gets too long
		{driver: "gpu.nvidia.com", pool: "rack-1/node-1", node: "node-1", wantSlices: "ResourceSlice name"},
		{driver: "gpu.nvidia.com", pool: "", node: "node-1", wantBuild: "pool name is empty"},
		{driver: "gpu.nvidia.com", pool: "GPU_node", node: "node-1", wantBuild: `pool name "GPU_node"`},
		{driver: "gpu.nvidia.com", pool: "node-1/", node: "node-1", wantBuild: `pool name "node-1/"`},
		{driver: "gpu.nvidia.com", pool: label63 + "." + label63 + "." + label63 + "." + strings.Repeat("a", 62), node: "n",
			wantBuild: "no more than 253 characters"},
		{driver: "GPU.nvidia.com", pool: "node-1", node: "node-1", wantBuild: `driver name "GPU.nvidia.com"`},
		{driver: "gpu_nvidia", pool: "node-1", node: "node-1", wantBuild: `driver name "gpu_nvidia"`},
		{driver: strings.Repeat("a", 60) + ".com", pool: "node-1", node: "node-1", wantBuild: "no more than 63 characters"},
		{driver: "gpu.nvidia.com", pool: "node-1", node: "Node_1", wantSlices: `node name "Node_1"`},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%.20s/%.20s/%s", c.driver, c.pool, c.node), func(t *testing.T) {
			b := gpudra.NewBuilder(gpudra.WithDriverName(c.driver))
			pool, err := b.Build(c.pool, inv)
			if got := errSubstring(err, c.wantBuild); got != c.wantBuild {
				t.Fatalf("Build: error %v, want one containing %q", err, c.wantBuild)
			}
			if err != nil {
				return
			}
			_, err = gpudra.ResourceSlices(c.driver, c.node, pool)
			if got := errSubstring(err, c.wantSlices); got != c.wantSlices {
				t.Errorf("ResourceSlices: error %v, want one containing %q", err, c.wantSlices)
			}
		})
	}
}

// errSubstring returns want when err contains it, "" when err is nil, and err's text otherwise.
func errSubstring(err error, want string) string {
	switch {
	case err == nil:
		return ""
	case want != "" && strings.Contains(err.Error(), want):
		return want
	}
	return err.Error()
}

// TestNilArguments: the exported entry points given a nil inventory, pool or MIG device return
// an error (or an empty name) instead of panicking.
func TestNilArguments(t *testing.T) {
	b := gpudra.NewBuilder()
	calls := map[string]func() error{
		"Builder.Build":     func() error { _, err := b.Build("node-1", nil); return err },
		"Builder.Devices":   func() error { _, err := b.Devices(nil); return err },
		"Builder.Published": func() error { _, err := b.Published(nil); return err },
		"ResourceSlices":    func() error { _, err := gpudra.ResourceSlices(gpudra.DefaultDriverName, "node-1", nil); return err },
	}
	nilcheck.ErrorsOnly(t, calls)
	if got := nilcheck.Outcome(func() error { gpudra.MIGDeviceNameOf(nil); return nil }); got != "no error" {
		t.Errorf("MIGDeviceNameOf(nil): %s", got)
	}
}
