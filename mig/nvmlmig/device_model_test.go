package nvmlmig_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

// TestDeviceModelFollowsTheDevice: a GPU whose profile info differs from the catalog (as after a
// driver release that shrank 1g.5gb and a firmware that offers fewer placements) is modelled as
// the device says, and the differences are reported as data.
func TestDeviceModelFollowsTheDevice(t *testing.T) {
	machine, err := gputest.New("dgx-a100-40gb", gputest.WithMIGProfileEdit("1g.5gb", func(p *mig.GIProfile) {
		p.MemoryMiB = 4608
		p.Placements = p.Placements[:3]
	}))
	if err != nil {
		t.Fatal(err)
	}
	live, diffs, err := nvmlmig.DeviceModel(machine.Device(0))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := live.Profile("1g.5gb")
	if p.MemoryMiB != 4608 || !slices.Equal(p.Placements, []mig.Placement{{Start: 0, Size: 1}, {Start: 1, Size: 1}, {Start: 2, Size: 1}}) {
		t.Errorf("live 1g.5gb: %d MiB at %v; want the device's 4608 MiB at 0, 1, 2", p.MemoryMiB, p.Placements)
	}
	if p.Sources.Memory != mig.SourceDevice || live.Name != "A100-SXM4-40GB" || len(p.ComputeProfiles) == 0 {
		t.Errorf("live 1g.5gb sources %+v, model %q, %d compute profiles", p.Sources, live.Name, len(p.ComputeProfiles))
	}
	want := []mig.Difference{
		{Field: "profiles[1g.5gb].memoryMiB", Model: "A100-SXM4-40GB", Profile: "1g.5gb", Property: "memoryMiB", Table: "4864", Live: "4608"},
		{Field: "profiles[1g.5gb].placements", Model: "A100-SXM4-40GB", Profile: "1g.5gb", Property: "placements",
			Table: "0:1,1:1,2:1,3:1,4:1,5:1,6:1", Live: "0:1,1:1,2:1"},
	}
	if diff := cmp.Diff(want, diffs); diff != "" {
		t.Errorf("differences (-want +got):\n%s", diff)
	}
	// The device model drives the InstanceManager: a placement only the catalog allows is refused up
	// front, one the device allows is created and removed again.
	mg, err := nvmlmig.NewInstanceManager(machine.Device(0), live)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mg.Apply([]mig.Instance{mig.At("1g.5gb", 5)}); err == nil {
		t.Error("Apply at a placement the device does not offer succeeded")
	}
	if _, err := mg.Apply([]mig.Instance{mig.At("1g.5gb", 2)}); err != nil {
		t.Fatal(err)
	}
	if err := mg.Remove([]mig.Instance{mig.At("1g.5gb", 2)}); err != nil || len(machine.GPUInstances(0)) != 0 {
		t.Errorf("Remove: %v, %d instances left", err, len(machine.GPUInstances(0)))
	}
}

// TestDeviceModelAgreesWithCatalog reads every fake MIG GPU through NVML: every profile the
// catalog lists (+me, -me, +me.all and +gfx variants included) comes back with the catalog's name,
// Id, memory, SMs, engines, count and placements, and nothing else does.
func TestDeviceModelAgreesWithCatalog(t *testing.T) {
	for _, name := range gputest.Machines() {
		machine, err := gputest.New(name)
		if err != nil {
			t.Fatal(err)
		}
		if machine.MIGModel(0) == nil {
			continue
		}
		live, diffs, err := nvmlmig.DeviceModel(machine.Device(0))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(diffs) != 0 {
			t.Errorf("%s: catalog and device differ: %v", name, diffs)
		}
		cat, _ := mig.Lookup(live.Name)
		if !slices.Equal(slices.Sorted(slices.Values(live.ProfileNames())), slices.Sorted(slices.Values(cat.ProfileNames()))) {
			t.Errorf("%s: device lists %v, catalog %v", name, live.ProfileNames(), cat.ProfileNames())
		}
	}
}

func TestDeviceModelErrors(t *testing.T) {
	if _, _, err := nvmlmig.DeviceModel(nil); err == nil {
		t.Error("DeviceModel(nil) succeeded")
	}
	if d := mig.Compare(nil, nil); len(d) != 1 || d[0].Property != "model" {
		t.Errorf("Compare(nil, nil) = %v", d)
	}
}
