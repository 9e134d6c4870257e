package main

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra"
)

// TestRenderMIGPublishing: --mig-partitions-first puts the MIG partitions before the full GPUs,
// and --mig-one-me-placement publishes 1g.5gb+me once per GPU instead of at its 7 placements.
func TestRenderMIGPublishing(t *testing.T) {
	devices := func(args ...string) []resourceapi.Device {
		t.Helper()
		code, out, errOut := runCLI(t, append([]string{"render", "--machine", "dgx-a100-40gb", "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("render %v: exit %d: %s", args, code, errOut)
		}
		var list struct {
			Items []resourceapi.ResourceSlice `json:"items"`
		}
		if err := yaml.Unmarshal([]byte(out), &list); err != nil {
			t.Fatal(err)
		}
		var devs []resourceapi.Device
		for _, s := range list.Items {
			devs = append(devs, s.Spec.Devices...)
		}
		return devs
	}
	profileCount := func(devs []resourceapi.Device, profile string) int {
		n := 0
		for _, d := range devs {
			if p, ok := d.Attributes[gpudra.AttrProfile]; ok && *p.StringValue == profile {
				n++
			}
		}
		return n
	}
	isGPU := func(d resourceapi.Device) bool { return *d.Attributes[gpudra.AttrType].StringValue == "gpu" }
	if def := devices("--dynamic-mig"); !isGPU(def[0]) || profileCount(def, "1g.5gb+me") != 8*7 {
		t.Fatalf("default: first device %s, %d 1g.5gb+me devices; want a GPU first and 56", def[0].Name, profileCount(def, "1g.5gb+me"))
	}
	if first := devices("--dynamic-mig", "--mig-partitions-first"); isGPU(first[0]) || !isGPU(first[len(first)-1]) {
		t.Errorf("--mig-partitions-first: first device %s, last %s; want partitions first, GPUs last", first[0].Name, first[len(first)-1].Name)
	}
	if got := profileCount(devices("--dynamic-mig", "--mig-one-me-placement"), "1g.5gb+me"); got != 8 {
		t.Errorf("--mig-one-me-placement: %d 1g.5gb+me devices, want 8 (one per GPU)", got)
	}
	profiles := func(devs []resourceapi.Device) []string {
		var out []string
		for _, d := range devs {
			out = append(out, *d.Attributes[gpudra.AttrProfile].StringValue)
		}
		return out
	}
	// All-balanced A100 40GB: per GPU two 1g.5gb, one 2g.10gb, one 3g.20gb.
	byProfile := profiles(devices("--mig-config", "all-balanced", "--mig-by-profile"))
	want := slices.Concat(slices.Repeat([]string{"1g.5gb"}, 16), slices.Repeat([]string{"2g.10gb"}, 8), slices.Repeat([]string{"3g.20gb"}, 8))
	if diff := cmp.Diff(want, byProfile); diff != "" {
		t.Errorf("--mig-by-profile: profiles in publishing order (-want +got):\n%s", diff)
	}
	if def := profiles(devices("--mig-config", "all-balanced")); def[0] == def[1] && def[1] == def[2] {
		t.Errorf("without --mig-by-profile the first devices are all %s: the default order is GPU by GPU", def[0])
	}
}
