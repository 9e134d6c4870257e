package mig

import (
	"maps"
	"slices"
	"testing"
)

// FuzzParseConfig: mig-parted files never panic ParseConfig, and every configuration of a file
// it accepts goes through CheckConfig on an A100, an A30 and a GPU without MIG without panic.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"version: v1\nmig-configs:\n  one:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.5gb: 7}\n",
		"version: v1\nmig-configs:\n  a:\n  - devices: [0, 1]\n    mig-enabled: true\n    mig-devices: {3g.20gb: 2}\n  - devices: [2]\n    mig-enabled: false\n",
		"version: v1\nmig-configs:\n  a:\n  - devices: all\n    device-filter: [\"0x20B010DE\"]\n    mig-enabled: true\n    mig-devices: {1g.6gb: -1}\n",
		"version: v1\nmig-configs:\n  a:\n  - devices: [-1]\n    mig-enabled: true\n    mig-devices: {1g.5gb: 99999999999}\n",
		"Version: v1\n", "", "version: v2\n", "{", "\x00",
	} {
		f.Add(s)
	}
	a100, err := Lookup("A100-SXM4-40GB")
	if err != nil {
		f.Fatal(err)
	}
	a30, err := Lookup("A30")
	if err != nil {
		f.Fatal(err)
	}
	gpus := []GPUInfo{{Index: 0, Model: a100}, {Index: 1, Model: a30}, {Index: 2, ProductName: "NVIDIA L4"}}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := ParseConfig([]byte(s))
		if err != nil {
			return
		}
		for _, name := range slices.Sorted(maps.Keys(spec.MigConfigs)) {
			_, _ = CheckConfig(spec, name, gpus)
		}
	})
}
