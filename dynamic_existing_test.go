package gpudra_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

// firstGPU enumerates a machine and keeps its first GPU, so that the allocator has nowhere else
// to go.
func firstGPU(t *testing.T, machine string, o ...gputest.Option) *gpu.Inventory {
	t.Helper()
	inv := inventory(t, machine, o...)
	inv.GPUs = inv.GPUs[:1]
	return inv
}

// noneOwned says the driver created none of the existing MIG instances.
func noneOwned() gpudra.Option {
	return gpudra.WithDynamicMIGOwned(func(*gpu.GPU, *gpu.MIGDevice) bool { return false })
}

func partitionNames(t *testing.T, inv *gpu.Inventory, o ...gpudra.Option) []string {
	t.Helper()
	devs, err := gpudra.NewBuilder(o...).Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range devs {
		if _, err := gpudra.ParseMIGDeviceName(d.Name); err == nil {
			out = append(out, d.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestDynamicMIGBesideForeignInstances: a 3g.20gb instance someone else created at 4:4 leaves the
// placements A100 geometry allows in slices 0-3 (MIG User Guide: 1g at 0-3, 1g.10gb and 2g at 0
// and 2, 3g and 4g at 0; 4g beside 3g is valid since R510), and nothing else; the allocator then
// places a 4g.20gb at 0 and refuses everything after it.
func TestDynamicMIGBesideForeignInstances(t *testing.T) {
	inv := firstGPU(t, "dgx-a100-40gb", gputest.WithMIG(0, "3g.20gb@4"))
	want := []string{
		"gpu-0-mig-1g10gb-15-0", "gpu-0-mig-1g10gb-15-2",
		"gpu-0-mig-1g5gb-19-0", "gpu-0-mig-1g5gb-19-1", "gpu-0-mig-1g5gb-19-2", "gpu-0-mig-1g5gb-19-3",
		"gpu-0-mig-1g5gb-me-20-0", "gpu-0-mig-1g5gb-me-20-1", "gpu-0-mig-1g5gb-me-20-2", "gpu-0-mig-1g5gb-me-20-3",
		"gpu-0-mig-2g10gb-14-0", "gpu-0-mig-2g10gb-14-2",
		"gpu-0-mig-3g20gb-9-0", "gpu-0-mig-4g20gb-5-0",
	}
	if diff := cmp.Diff(want, partitionNames(t, inv, gpudra.WithDynamicMIG(nil), noneOwned())); diff != "" {
		t.Errorf("partitions beside a foreign 3g.20gb@4 (-want +got):\n%s", diff)
	}
	sim := simulate.New(testNode, selectors.DeviceClasses(""), slicesFor(t, inv, gpudra.WithDynamicMIG(nil), noneOwned()))
	got, err := sim.Allocate(context.Background(), migClaim(1, "4g.20gb"))
	if err != nil {
		t.Fatalf("4g.20gb beside the foreign 3g.20gb: %v", err)
	}
	if d := got.Status.Allocation.Devices.Results[0].Device; d != "gpu-0-mig-4g20gb-5-0" {
		t.Errorf("4g.20gb allocated as %s", d)
	}
	for i, p := range []string{"1g.5gb", "3g.20gb", "7g.40gb"} {
		if _, err := sim.Allocate(context.Background(), migClaim(10+i, p)); !errors.Is(err, simulate.ErrUnschedulable) {
			t.Errorf("%s on a GPU full of 4g.20gb and a foreign 3g.20gb: %v", p, err)
		}
	}
}

// TestDynamicMIGForeignMediaInstance: a foreign 1g.5gb+me takes the GPU's one set of media
// extensions (instance count 1, MIG User Guide), so no other +me placement is published and its
// instance counter is used up; plain 1g.5gb stays available beside it.
func TestDynamicMIGForeignMediaInstance(t *testing.T) {
	inv := firstGPU(t, "dgx-a100-40gb", gputest.WithMIG(0, "1g.5gb+me@0"))
	for _, n := range partitionNames(t, inv, gpudra.WithDynamicMIG(nil), noneOwned()) {
		if p, _ := gpudra.ParseMIGDeviceName(n); p.Profile == "1g5gb-me" || p.PlacementStart == 0 {
			t.Errorf("%s published beside a foreign 1g.5gb+me@0", n)
		}
	}
	sim := simulate.New(testNode, selectors.DeviceClasses(""), slicesFor(t, inv, gpudra.WithDynamicMIG(nil), noneOwned()))
	if _, err := sim.Allocate(context.Background(), migClaim(1, "1g.5gb")); err != nil {
		t.Errorf("1g.5gb beside a foreign 1g.5gb+me: %v", err)
	}
}

// TestDynamicMIGOwnedInstancesStayPublished: instances the driver says it created keep every
// placement published (the counters, not the device list, keep them apart), with the same names as
// on an empty GPU.
func TestDynamicMIGOwnedInstancesStayPublished(t *testing.T) {
	empty := partitionNames(t, firstGPU(t, "dgx-a100-40gb"), gpudra.WithDynamicMIG(nil))
	inv := firstGPU(t, "dgx-a100-40gb", gputest.WithMIG(0, "3g.20gb@4", "1g.5gb+me@0"))
	owned := gpudra.WithDynamicMIGOwned(func(g *gpu.GPU, d *gpu.MIGDevice) bool { return d.Profile == "3g.20gb" })
	got := partitionNames(t, inv, gpudra.WithDynamicMIG(nil), owned)
	var want []string
	for _, n := range empty {
		// Only the foreign 1g.5gb+me@0 withdraws placements: those on slice 0 and other +me ones.
		if p, _ := gpudra.ParseMIGDeviceName(n); p.Profile != "1g5gb-me" && p.PlacementStart != 0 {
			want = append(want, n)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("partitions with an owned 3g.20gb@4 and a foreign 1g.5gb+me@0 (-want +got):\n%s", diff)
	}
}

// TestDynamicMIGUsesTheDeviceModel: dynamic MIG publishes each GPU's geometry as the GPU reports
// it (gpu.GPU.MIGGeometry), not the catalog's: a GPU whose 1g.10gb allows only 2 instances
// (where the catalog says 4) is published with the device's count and memory, and a foreign
// 1g.10gb instance uses up one of the two: the allocator then fits exactly one more, although two
// placements stay free.
func TestDynamicMIGUsesTheDeviceModel(t *testing.T) {
	machine, err := gputest.New("dgx-a100-40gb", gputest.WithMIG(0, "1g.10gb@0"),
		gputest.WithMIGProfileEdit("1g.10gb", func(p *mig.GIProfile) { p.InstanceCount, p.MemoryMiB = 2, 9728 }))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), machine)
	if err != nil {
		t.Fatal(err)
	}
	inv.GPUs = inv.GPUs[:1]
	sl := slicesFor(t, inv, gpudra.WithDynamicMIG(nil), noneOwned())
	for _, d := range allDevices(sl) {
		if attr(d, "profile") == "1g.10gb" {
			if q := d.Capacity["memory"].Value; q.Value() != 9728<<20 {
				t.Errorf("%s memory %s, want the device's 9728Mi", d.Name, q.String())
			}
		}
	}
	sim := simulate.New(testNode, selectors.DeviceClasses(""), sl)
	if _, err := sim.Allocate(context.Background(), migClaim(1, "1g.10gb")); err != nil {
		t.Fatalf("second 1g.10gb: %v", err)
	}
	if _, err := sim.Allocate(context.Background(), migClaim(2, "1g.10gb")); !errors.Is(err, simulate.ErrUnschedulable) {
		t.Errorf("third 1g.10gb on a GPU that allows 2: %v", err)
	}
	// The catalog would have allowed it: the device, not the catalog, decided.
	inv.GPUs[0].MIGGeometry = nil
	sim = simulate.New(testNode, selectors.DeviceClasses(""), slicesFor(t, inv, gpudra.WithDynamicMIG(nil)))
	for i := range 2 {
		if _, err := sim.Allocate(context.Background(), migClaim(i, "1g.10gb")); err != nil {
			t.Errorf("1g.10gb #%d with the catalog model: %v", i+2, err)
		}
	}
}

// TestDynamicMIGPublishingOrder: the 1g.5gb partitions of two A100s, one with a 3g.20gb at 0:4
// that the driver created, in the order the allocator will try them. By hand from A100 geometry:
// on the partly used GPU 1 a 1g at 6 costs the upper 3g and one 1g.10gb, at 4 or 5 it also costs
// a 2g, so 6, then 4 and 5 (ties: lower start, as Plan); only then does the empty GPU 0 get its
// first 1g (which breaks its 7g), in its own order 6, 4, 5, then 0..3. GPU 1's slices 0-3 come
// last (they do not fit now).
func TestDynamicMIGPublishingOrder(t *testing.T) {
	inv := inventory(t, "dgx-a100-40gb", gputest.WithMIG(1, "3g.20gb@0"))
	inv.GPUs = inv.GPUs[:2]
	owned := gpudra.WithDynamicMIGOwned(func(*gpu.GPU, *gpu.MIGDevice) bool { return true })
	devs, err := gpudra.NewBuilder(gpudra.WithDynamicMIG(nil), owned).Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range devs {
		if n, err := gpudra.ParseMIGDeviceName(d.Name); err == nil && n.Profile == "1g5gb" {
			got = append(got, d.Name)
		}
	}
	want := []string{
		"gpu-1-mig-1g5gb-19-6", "gpu-1-mig-1g5gb-19-4", "gpu-1-mig-1g5gb-19-5",
		"gpu-0-mig-1g5gb-19-6", "gpu-0-mig-1g5gb-19-4", "gpu-0-mig-1g5gb-19-5", "gpu-0-mig-1g5gb-19-0",
		"gpu-0-mig-1g5gb-19-1", "gpu-0-mig-1g5gb-19-2", "gpu-0-mig-1g5gb-19-3",
		"gpu-1-mig-1g5gb-19-0", "gpu-1-mig-1g5gb-19-1", "gpu-1-mig-1g5gb-19-2", "gpu-1-mig-1g5gb-19-3",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("1g.5gb publishing order (-want +got):\n%s", diff)
	}
}

// TestDynamicMIGPublishingOrderConsolidates: on two empty A100s the 1g.5gb partitions come GPU by
// GPU (6, 4, 5, 0..3 on GPU 0, then GPU 1): once a 1g sits on GPU 0 its 7g is gone, so the next
// 1g costs less there than on GPU 1. A burst of 1g claims between two publications therefore
// fills one GPU instead of breaking both.
func TestDynamicMIGPublishingOrderConsolidates(t *testing.T) {
	inv := inventory(t, "dgx-a100-40gb")
	inv.GPUs = inv.GPUs[:2]
	devs, err := gpudra.NewBuilder(gpudra.WithDynamicMIG(nil)).Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range devs {
		if n, err := gpudra.ParseMIGDeviceName(d.Name); err == nil && n.Profile == "1g5gb" {
			got = append(got, d.Name)
		}
	}
	var want []string
	for _, g := range []string{"0", "1"} {
		for _, s := range []string{"6", "4", "5", "0", "1", "2", "3"} {
			want = append(want, "gpu-"+g+"-mig-1g5gb-19-"+s)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("1g.5gb publishing order on two empty GPUs (-want +got):\n%s", diff)
	}
}

// TestDynamicMIGWithoutOwnership: without WithDynamicMIGOwned the builder cannot tell whose the
// instances are, so it withdraws nothing (a restarted driver keeps publishing the partitions its
// prepared claims hold) and leaves the whole GPU out while any instance exists.
func TestDynamicMIGWithoutOwnership(t *testing.T) {
	empty := partitionNames(t, firstGPU(t, "dgx-a100-40gb"), gpudra.WithDynamicMIG(nil))
	inv := firstGPU(t, "dgx-a100-40gb", gputest.WithMIG(0, "3g.20gb@4"))
	if diff := cmp.Diff(empty, partitionNames(t, inv, gpudra.WithDynamicMIG(nil))); diff != "" {
		t.Errorf("partitions beside an instance of unknown owner (-empty GPU +got):\n%s", diff)
	}
	devs, err := gpudra.NewBuilder(gpudra.WithDynamicMIG(nil)).Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(devs, func(d resourceapi.Device) bool { return d.Name == gpudra.GPUDeviceName(0) }) {
		t.Error("the whole GPU is published beside a MIG instance of unknown owner")
	}
	owned := gpudra.WithDynamicMIGOwned(func(*gpu.GPU, *gpu.MIGDevice) bool { return true })
	devs, err = gpudra.NewBuilder(gpudra.WithDynamicMIG(nil), owned).Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(devs, func(d resourceapi.Device) bool { return d.Name == gpudra.GPUDeviceName(0) }) {
		t.Error("the whole GPU is not published beside the driver's own instance")
	}
}
