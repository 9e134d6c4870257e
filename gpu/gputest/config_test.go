package gputest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// profileCounts counts the MIG devices of a machine by profile.
func profileCounts(m *Machine) map[string]int {
	out := map[string]int{}
	for i := range m.NumGPUs() {
		for _, gi := range m.GPUInstances(i) {
			for _, ci := range gi.ComputeInstances {
				out[ci.Profile]++
			}
		}
	}
	return out
}

func TestWithMIGConfig(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "one.yaml")
	if err := os.WriteFile(one, []byte(`version: v1
mig-configs:
  custom:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
    - devices: [2, 3, 4, 5, 6, 7]
      mig-enabled: false
`), 0o600); err != nil {
		t.Fatal(err)
	}
	two := filepath.Join(dir, "two.yaml")
	if err := os.WriteFile(two, []byte(`version: v1
mig-configs:
  a:
    - devices: all
      mig-enabled: false
  b:
    - devices: all
      mig-enabled: true
      mig-devices: {"7g.40gb": 1}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		machine string
		opts    []Option
		want    map[string]int
		enabled int // GPUs with MIG mode on
	}{
		{"dgx-a100-40gb", []Option{WithMIGConfig("all-balanced")}, map[string]int{"1g.5gb": 16, "2g.10gb": 8, "3g.20gb": 8}, 8},
		{"dgx-a100-40gb", []Option{WithMIGConfig("all-1g.5gb")}, map[string]int{"1g.5gb": 56}, 8},
		{"dgx-a100-80gb", []Option{WithMIGConfig("all-balanced")}, map[string]int{"1g.10gb": 16, "2g.20gb": 8, "3g.40gb": 8}, 8},
		{"dgx-h100", []Option{WithMIGConfig("all-balanced")}, map[string]int{"1g.10gb": 16, "2g.20gb": 8, "3g.40gb": 8}, 8},
		{"dgx-b200", []Option{WithMIGConfig("all-7g.180gb")}, map[string]int{"7g.180gb": 8}, 8},
		{"a30x4", []Option{WithMIGConfig("all-balanced")}, map[string]int{"1g.6gb": 8, "2g.12gb": 4}, 4},
		{"dgx-a100-40gb", []Option{WithMIGConfig("all-enabled")}, map[string]int{}, 8},
		{"dgx-a100-40gb", []Option{WithMIGConfig("all-disabled")}, map[string]int{}, 0},
		{"l4x8", []Option{WithMIGConfig("all-balanced")}, map[string]int{}, 0},
		{"dgx-a100-40gb", []Option{WithMIGConfig(one)}, map[string]int{"3g.20gb": 4}, 2},
		{"dgx-a100-40gb", []Option{WithMIGConfigFile(two, "b")}, map[string]int{"7g.40gb": 8}, 8},
		// WithMIG overrides the configuration for its GPU.
		{"dgx-a100-40gb", []Option{WithMIGConfig("all-7g.40gb"), WithMIG(3, "4g.20gb")}, map[string]int{"7g.40gb": 7, "4g.20gb": 1}, 8},
	}
	for _, tt := range tests {
		m := mustNew(t, tt.machine, tt.opts...)
		if diff := cmp.Diff(tt.want, profileCounts(m)); diff != "" {
			t.Errorf("%s: MIG devices (-want +got):\n%s", tt.machine, diff)
		}
		enabled := 0
		for i := range m.NumGPUs() {
			if m.MIGEnabled(i) {
				enabled++
			}
		}
		if enabled != tt.enabled {
			t.Errorf("%s: %d GPUs with MIG on, want %d", tt.machine, enabled, tt.enabled)
		}
	}
	errTests := []struct {
		machine string
		opt     Option
		want    string
	}{
		{"dgx-a100-40gb", WithMIGConfig("all-bogus"), "all-balanced"},
		{"dgx-h100", WithMIGConfig("all-1g.5gb"), "devices 0-7 (H100 80GB HBM3): no entry applies"},
		{"dgx-a100-40gb", WithMIGConfig(two), "use WithMIGConfigFile"},
		{"dgx-a100-40gb", WithMIGConfigFile(two, "c"), `"c" not present`},
		{"dgx-a100-40gb", WithMIGConfig(filepath.Join(dir, "missing.yaml")), "no such file"},
	}
	for _, tt := range errTests {
		if _, err := New(tt.machine, tt.opt); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to contain %q", tt.machine, err, tt.want)
		}
	}
}
