package draplugin

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
)

// TestCDIDevice checks the CDI entry of every published device against the inventory it came from:
// a GPU by its own minor and UUID, an existing MIG device by its parent's minor, its own UUID
// and its instance IDs, a dynamic partition (no instance yet) by its parent alone.
func TestCDIDevice(t *testing.T) {
	for _, tc := range []struct {
		name    string
		options []gputest.Option
		builder []gpudra.Option
	}{
		{name: "full GPUs"},
		{name: "static MIG", options: []gputest.Option{gputest.WithMIGConfig("all-balanced")}},
		{name: "dynamic MIG", builder: []gpudra.Option{gpudra.WithDynamicMIG(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			machine, err := gputest.New("dgx-a100-40gb", tc.options...)
			if err != nil {
				t.Fatal(err)
			}
			inv, err := nvmlgpu.Enumerate(context.Background(), machine)
			if err != nil {
				t.Fatal(err)
			}
			published, err := gpudra.NewBuilder(tc.builder...).Published(inv)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]cdi.Device{}
			for _, g := range inv.GPUs {
				want[gpudra.GPUDeviceName(g.Minor)] = cdi.Device{Name: gpudra.GPUDeviceName(g.Minor), GPUMinor: g.Minor, UUID: g.UUID}
				for _, m := range g.MIGDevices {
					name := gpudra.MIGDeviceNameOf(&m)
					want[name] = cdi.Device{Name: name, GPUMinor: g.Minor, UUID: m.UUID, MIG: &cdi.MIGInstanceIDs{GI: m.GIID, CI: m.CIID}}
				}
			}
			for _, d := range published {
				w, ok := want[d.Name]
				if d.Partition != nil {
					w, ok = cdi.Device{Name: d.Name, GPUMinor: d.GPU.Minor, UUID: d.GPU.UUID}, true
				}
				if !ok {
					t.Fatalf("published device %s is not in the inventory", d.Name)
				}
				if diff := cmp.Diff(w, cdiDevice(d)); diff != "" {
					t.Errorf("cdiDevice of %s (-want +got):\n%s", d.Name, diff)
				}
				if d.MIG != nil && (d.GPU == nil || cdiDevice(d).GPUMinor != d.GPU.Minor) {
					t.Errorf("cdiDevice of MIG device %s does not name its parent GPU's /dev/nvidia%d", d.Name, d.MIG.ParentMinor)
				}
			}
		})
	}
}
