package main

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra"
)

// TestRenderMIGPublishing: --mig-partitions-first puts the MIG partitions before the full GPUs,
// and --mig-one-me-placement publishes 1g.5gb+me once per GPU instead of at its 7 placements.
func TestRenderMIGPublishing(t *testing.T) {
	devices := func(args ...string) []resourceapi.Device {
		t.Helper()
		code, out, errOut := runCLI(t, append([]string{"render", "--machine", "dgx-a100-40gb", "--dynamic-mig", "-o", "json"}, args...)...)
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
	if def := devices(); !isGPU(def[0]) || profileCount(def, "1g.5gb+me") != 8*7 {
		t.Fatalf("default: first device %s, %d 1g.5gb+me devices; want a GPU first and 56", def[0].Name, profileCount(def, "1g.5gb+me"))
	}
	if first := devices("--mig-partitions-first"); isGPU(first[0]) || !isGPU(first[len(first)-1]) {
		t.Errorf("--mig-partitions-first: first device %s, last %s; want partitions first, GPUs last", first[0].Name, first[len(first)-1].Name)
	}
	if got := profileCount(devices("--mig-one-me-placement"), "1g.5gb+me"); got != 8 {
		t.Errorf("--mig-one-me-placement: %d 1g.5gb+me devices, want 8 (one per GPU)", got)
	}
}
