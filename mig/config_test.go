package mig

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const customConfig = `
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  custom-config:
    - devices: [0,1,2,3]
      mig-enabled: false
    - devices: [4,5]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
    - devices: [6,7]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
  filtered:
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
    - device-filter: ["0x233010DE", "0x233110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
  ci-packed:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1c.3g.20gb": 3
        "2g.10gb": 1
`

func dgxA100(n int) []GPUInfo {
	var gpus []GPUInfo
	for i := range n {
		gpus = append(gpus, GPUInfo{Index: i, ProductName: "NVIDIA A100-SXM4-40GB", PCIDeviceID: 0x20B010DE})
	}
	return gpus
}

func countProfiles(l []Instance) map[string]int {
	out := map[string]int{}
	for _, in := range l {
		out[in.Profile]++
	}
	return out
}

func TestParseConfigAndCheck(t *testing.T) {
	spec, err := ParseConfig([]byte(customConfig))
	if err != nil {
		t.Fatal(err)
	}
	plans, err := CheckConfig(spec, "custom-config", dgxA100(8))
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]int
	for _, p := range plans {
		if !p.MigEnabled {
			got = append(got, nil)
			continue
		}
		got = append(got, countProfiles(p.Layout))
	}
	want := []map[string]int{nil, nil, nil, nil,
		{"1g.5gb": 7}, {"1g.5gb": 7},
		{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("custom-config (-want +got):\n%s", diff)
	}

	mixed := []GPUInfo{
		{Index: 0, ProductName: "A100-SXM4-40GB", PCIDeviceID: 0x20B010DE},
		{Index: 1, ProductName: "NVIDIA H100 80GB HBM3", PCIDeviceID: 0x233010DE},
	}
	plans, err = CheckConfig(spec, "filtered", mixed)
	if err != nil {
		t.Fatal(err)
	}
	if c := countProfiles(plans[0].Layout); c["3g.20gb"] != 2 {
		t.Errorf("filtered GPU 0: %v", c)
	}
	if c := countProfiles(plans[1].Layout); c["3g.40gb"] != 2 {
		t.Errorf("filtered GPU 1: %v", c)
	}

	plans, err = CheckConfig(spec, "ci-packed", dgxA100(1))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"3g.20gb": 1, "2g.10gb": 1}, countProfiles(plans[0].Layout)); diff != "" {
		t.Errorf("ci-packed: three 1c.3g.20gb fit one 3g GPU instance (-want +got):\n%s", diff)
	}
}

// TestCheckConfigHugeCount: a count in a mig-parted file is any number; one beyond what a GPU
// holds is refused with the limit, before anything is built per instance (memory would grow with
// the number: 200,000 took about 80 MiB, a billion would exhaust the node).
func TestCheckConfigHugeCount(t *testing.T) {
	for _, count := range []string{"8", "200000"} {
		spec, err := ParseConfig([]byte("version: v1\nmig-configs:\n  big:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      1g.5gb: " + count + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = CheckConfig(spec, "big", []GPUInfo{{Index: 0, ProductName: "NVIDIA A100-SXM4-40GB", PCIDeviceID: 0x20B010DE}})
		runtime.ReadMemStats(&after)
		var ve *ValidationError
		if want := count + " instances of 1g.5gb (allowed: at most 7)"; !errors.As(err, &ve) || ve.Kind != ConflictCount || !strings.Contains(err.Error(), want) {
			t.Errorf("count %s: error %v, want a count ValidationError containing %q", count, err, want)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
			t.Errorf("count %s: checking allocated %d KiB", count, alloc>>10)
		}
	}
}

func TestCheckConfigErrors(t *testing.T) {
	spec, err := ParseConfig([]byte(customConfig))
	if err != nil {
		t.Fatal(err)
	}
	// custom-config on A30s: 1g.5gb is not an A30 profile.
	var a30s []GPUInfo
	for i := range 8 {
		a30s = append(a30s, GPUInfo{Index: i, ProductName: "NVIDIA A30", PCIDeviceID: 0x20B710DE})
	}
	_, err = CheckConfig(spec, "custom-config", a30s)
	// GPUs 4-7 fail for the same reason (their entries ask for 1g.5gb): one error names them all.
	for _, s := range []string{`mig config "custom-config", devices 4-7 (A30)`, `"1g.5gb"`} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("error %v does not contain %q", err, s)
		}
	}
	if n := strings.Count(fmt.Sprint(err), "mig config"); n != 1 {
		t.Errorf("error names the configuration %d times, want once:\n%v", n, err)
	}
	if _, err := CheckConfig(spec, "nope", a30s); err == nil || !strings.Contains(err.Error(), "custom-config") {
		t.Errorf("unknown config error %v should list the available ones", err)
	}
	// "filtered" has no entry for an A30.
	if _, err := CheckConfig(spec, "filtered", a30s[:1]); err == nil || !strings.Contains(err.Error(), "no entry applies") {
		t.Errorf("filtered on A30: %v", err)
	}
	// Non-MIG GPUs: skipped with devices: all, an error when enabled by index.
	l4 := []GPUInfo{{Index: 4, ProductName: "NVIDIA L4", PCIDeviceID: 0x27B810DE}}
	if plans, err := CheckConfig(spec, "all-disabled", l4); err != nil || len(plans) != 0 {
		t.Errorf("all-disabled on L4: %v %v", plans, err)
	}
	if _, err := CheckConfig(spec, "custom-config", l4); err == nil || !strings.Contains(err.Error(), "not MIG-capable") {
		t.Errorf("custom-config on L4: %v", err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct{ name, yaml, contains string }{
		{"unknown top field", "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\nextra: 1\n", "extra"},
		{"unknown entry field", "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, foo: 1}]}\n", "foo"},
		{"missing version", "mig-configs: {a: [{devices: all, mig-enabled: false}]}\n", "version"},
		{"bad version", "version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n", `unknown version "v2"`},
		{"no configs", "version: v1\nmig-configs: {}\n", "at least one"},
		{"empty config", "version: v1\nmig-configs: {a: []}\n", `mig-configs["a"]: needs at least one entry`},
		{"devices string", "version: v1\nmig-configs: {a: [{devices: some, mig-enabled: false}]}\n", `"some"`},
		{"missing devices", "version: v1\nmig-configs: {a: [{mig-enabled: false}]}\n", `mig-configs["a"][0]: missing required field devices`},
		{"missing mig-enabled", "version: v1\nmig-configs: {a: [{devices: all}]}\n", "missing required field mig-enabled"},
		{"enabled without devices", "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}\n", "missing required field mig-devices"},
		{"disabled with devices", "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, mig-devices: {1g.5gb: 1}}]}\n", "mig-enabled is false"},
		{"bad profile", "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.5GB: 1}}]}\n", `mig-devices["1g.5GB"]: invalid MIG profile "1g.5GB" at byte 4`},
		{"negative", "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.5gb: -1}}]}\n", "negative"},
		{"all zero", "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.5gb: 0}}]}\n", "all counts are 0"},
		{"duplicate key", "version: v1\nversion: v1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n", "version"},
	}
	for _, tt := range tests {
		_, err := ParseConfig([]byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.contains) {
			t.Errorf("%s: error %v, want it to contain %q", tt.name, err, tt.contains)
		}
	}
	// all-enabled's empty mig-devices is allowed.
	if _, err := ParseConfig([]byte("version: v1\nmig-configs: {all-enabled: [{devices: all, mig-enabled: true, mig-devices: {}}]}\n")); err != nil {
		t.Errorf("all-enabled: %v", err)
	}
}

// TestBuiltinConfigs checks named configs against mig-parted's built-in file (research §3.3) and
// seed 001 (all-balanced on a DGX A100: 2×1g.5gb + 2g.10gb + 3g.20gb per GPU, 32 MIG devices).
func TestBuiltinConfigs(t *testing.T) {
	if err := BuiltinConfigs().Validate(); err != nil {
		t.Fatal(err)
	}
	plans, err := CheckConfig(BuiltinConfigs(), "all-balanced", dgxA100(8))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, p := range plans {
		total += len(p.Layout)
		if diff := cmp.Diff(map[string]int{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}, countProfiles(p.Layout)); diff != "" {
			t.Errorf("GPU %d (-want +got):\n%s", p.Index, diff)
		}
	}
	if total != 32 {
		t.Errorf("all-balanced on DGX A100: %d MIG devices, want 32", total)
	}

	balanced := map[string]map[string]int{
		"A100-SXM4-80GB":         {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
		"H100 80GB HBM3":         {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
		"H100 NVL":               {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1},
		"H20":                    {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1},
		"H200":                   {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
		"GH200 144G HBM3e":       {"1g.18gb": 2, "2g.36gb": 1, "3g.72gb": 1},
		"B200":                   {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1},
		"GB200":                  {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1},
		"A30":                    {"1g.6gb": 2, "2g.12gb": 1},
		"RTX PRO 6000 Blackwell": {"1g.24gb": 2, "2g.48gb": 1},
	}
	for name, want := range balanced {
		on, layout, err := NamedConfigLayout("all-balanced", mustLookup(t, name))
		if err != nil || !on {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if diff := cmp.Diff(want, countProfiles(layout)); diff != "" {
			t.Errorf("all-balanced on %s (-mig-parted +got):\n%s", name, diff)
		}
	}

	for _, tt := range []struct {
		config, model string
		want          map[string]int
	}{
		{"all-1g.10gb", "A100-SXM4-40GB", map[string]int{"1g.10gb": 4}},
		{"all-1g.10gb", "A100-SXM4-80GB", map[string]int{"1g.10gb": 7}},
		{"all-1g.5gb.me", "A100-SXM4-40GB", map[string]int{"1g.5gb+me": 1}},
		{"all-1g.35gb", "H200", map[string]int{"1g.35gb": 4}},
		{"all-1g.24gb-me", "RTX PRO 6000 Blackwell", map[string]int{"1g.24gb-me": 4}},
		{"all-1g.24gb.me.all", "RTX PRO 6000 Blackwell", map[string]int{"1g.24gb+me.all": 1}},
		{"all-4g.96gb.gfx", "RTX PRO 6000 Blackwell", map[string]int{"4g.96gb+gfx": 1}},
		{"all-enabled", "H100 80GB HBM3", map[string]int{}},
	} {
		on, layout, err := NamedConfigLayout(tt.config, mustLookup(t, tt.model))
		if err != nil || !on {
			t.Errorf("%s on %s: %v", tt.config, tt.model, err)
			continue
		}
		if diff := cmp.Diff(tt.want, countProfiles(layout)); diff != "" {
			t.Errorf("%s on %s (-want +got):\n%s", tt.config, tt.model, diff)
		}
	}
	if on, _, err := NamedConfigLayout("all-disabled", mustLookup(t, "B200")); err != nil || on {
		t.Errorf("all-disabled: %v %v", on, err)
	}
	_, _, err = NamedConfigLayout("all-1g.5gb", mustLookup(t, "H100 80GB HBM3"))
	var dummy *ValidationError
	if err == nil || errors.As(err, &dummy) || !strings.Contains(err.Error(), "no entry applies") {
		t.Errorf("all-1g.5gb on H100: %v", err)
	}
}

// TestCheckConfigGroupsErrors: GPUs that fail for the same reason share one error naming all of
// them; different reasons stay apart.
func TestCheckConfigGroupsErrors(t *testing.T) {
	spec, err := ParseConfig([]byte(`
version: v1
mig-configs:
  grouped:
    - devices: [0, 1, 2, 3, 5]
      mig-enabled: true
      mig-devices: {"3g.20gb": 3}
    - devices: [4]
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
    - devices: [6, 7]
      mig-enabled: false
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = CheckConfig(spec, "grouped", dgxA100(8))
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("CheckConfig: %v, want joined errors", err)
	}
	var got []string
	for _, e := range joined.Unwrap() {
		where, _, _ := strings.Cut(e.Error(), "): ")
		got = append(got, where+")")
	}
	want := []string{
		`mig config "grouped", devices 0-3,5 (A100-SXM4-40GB)`,
		`mig config "grouped", device 4 (A100-SXM4-40GB)`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("errors (-want +got):\n%s\nfull error:\n%v", diff, err)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Errorf("the layout errors are not reachable as *ValidationError: %v", err)
	}
}
