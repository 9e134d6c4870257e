package gpudra_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

// devicesOf builds the devices of the machine with dynamic MIG and opts, in publishing order.
func devicesOf(t *testing.T, machine string, opts ...gpudra.Option) []resourceapi.Device {
	t.Helper()
	devs, err := gpudra.NewBuilder(append([]gpudra.Option{gpudra.WithDynamicMIG(nil)}, opts...)...).Devices(inventory(t, machine))
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

func byName(devs []resourceapi.Device) map[string]resourceapi.Device {
	out := map[string]resourceapi.Device{}
	for _, d := range devs {
		out[d.Name] = d
	}
	return out
}

// TestPartitionsFirst: the same devices, the partitions before the full GPUs.
func TestPartitionsFirst(t *testing.T) {
	def := devicesOf(t, "dgx-a100-40gb")
	first := devicesOf(t, "dgx-a100-40gb", gpudra.WithPartitionsFirst())
	if diff := cmp.Diff(byName(def), byName(first)); diff != "" {
		t.Errorf("devices differ from the default order's (-default +partitions first):\n%s", diff)
	}
	isGPU := func(d resourceapi.Device) bool { return *d.Attributes[gpudra.AttrType].StringValue == "gpu" }
	firstGPU := slices.IndexFunc(first, isGPU)
	if firstGPU < 0 || slices.ContainsFunc(first[:firstGPU], isGPU) || !isGPU(first[len(first)-1]) ||
		firstGPU != len(first)-8 {
		t.Errorf("with WithPartitionsFirst the 8 full GPUs are not the last devices (first at %d of %d)", firstGPU, len(first))
	}
	if !isGPU(def[0]) {
		t.Errorf("by default the first device is %s, want a full GPU", def[0].Name)
	}
}

// TestOneMediaExtensionPlacement: each profile with "+me" in its name is published once per
// GPU, at the placement with the highest start the catalog lists; every other device is
// published as without the option. The real allocator still gives each GPU one such instance.
func TestOneMediaExtensionPlacement(t *testing.T) {
	model, err := mig.Lookup("A100-SXM4-40GB")
	if err != nil {
		t.Fatal(err)
	}
	highest := map[string]int{}
	for _, p := range model.Profiles {
		if strings.Contains(p.Name, "+me") {
			for _, pl := range p.Placements {
				highest[p.Name] = max(highest[p.Name], pl.Start)
			}
		}
	}
	if len(highest) == 0 {
		t.Fatalf("%s has no +me profile", model.Name)
	}
	want := map[string]resourceapi.Device{}
	for _, d := range devicesOf(t, "dgx-a100-40gb") {
		if p, ok := d.Attributes[gpudra.AttrProfile]; ok && strings.Contains(*p.StringValue, "+me") {
			n, err := gpudra.ParseMIGDeviceName(d.Name)
			if err != nil {
				t.Fatal(err)
			}
			if n.PlacementStart != highest[*p.StringValue] {
				continue
			}
		}
		want[d.Name] = d
	}
	got := devicesOf(t, "dgx-a100-40gb", gpudra.WithOneMediaExtensionPlacement())
	if diff := cmp.Diff(want, byName(got)); diff != "" {
		t.Errorf("published devices (-want +got):\n%s", diff)
	}

	slices := slicesFor(t, inventory(t, "dgx-a100-40gb"), gpudra.WithDynamicMIG(nil), gpudra.WithOneMediaExtensionPlacement())
	sim := simulate.New(testNode, selectors.DeviceClasses(""), slices)
	for i := range 8 {
		if _, err := sim.Allocate(context.Background(), migClaim(i, "1g.5gb+me")); err != nil {
			t.Fatalf("claim %d for 1g.5gb+me on 8 GPUs: %v", i, err)
		}
	}
	if _, err := sim.Allocate(context.Background(), migClaim(8, "1g.5gb+me")); !errors.Is(err, simulate.ErrUnschedulable) {
		t.Errorf("a ninth 1g.5gb+me on 8 GPUs: %v, want unschedulable (one per GPU)", err)
	}
}
