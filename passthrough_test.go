package gpudra_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

// everyGPU passes every GPU through, in IOMMU group 40 + minor.
func everyGPU(g *gpu.GPU) (int, bool) { return 40 + g.Minor, true }

// TestVFIOPublishingIsOptIn: without WithPassthrough, or with a func that passes no GPU through,
// the slices are exactly the default ones.
func TestVFIOPublishingIsOptIn(t *testing.T) {
	for _, machine := range []string{"dgx-a100-40gb", "l4x8"} {
		inv := inventory(t, machine)
		def := slicesFor(t, inv)
		none := slicesFor(t, inv, gpudra.WithPassthrough(func(*gpu.GPU) (int, bool) { return 0, false }))
		if diff := cmp.Diff(def, none); diff != "" {
			t.Errorf("%s: slices with no GPU passed through differ from the default (-default +got):\n%s", machine, diff)
		}
	}
}

func TestVFIODevices(t *testing.T) {
	inv := inventory(t, "l4x8")
	inv.GPUs = inv.GPUs[:2]
	b := gpudra.NewBuilder(gpudra.WithPassthrough(func(g *gpu.GPU) (int, bool) { return 40 + g.Minor, g.Index == 1 }),
		gpudra.WithConsumableMemory(gpudra.ConsumableMemory{}))
	pool, err := b.Build(testNode, inv)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]gpudra.Feature{gpudra.FeaturePartitionableDevices, gpudra.FeatureConsumableCapacity}, b.Features()); diff != "" {
		t.Errorf("Features() (-want +got):\n%s", diff)
	}
	g := inv.GPUs[1]
	set := fmt.Sprintf("gpu-%d-counter-set", g.Minor)
	one := map[string]resourceapi.Counter{gpudra.CounterGPU: {Value: *resourceQty(1)}}
	if diff := cmp.Diff([]resourceapi.CounterSet{{Name: set, Counters: one}}, counterSets(pool)); diff != "" {
		t.Errorf("counter sets (-want +got):\n%s", diff)
	}
	devs := poolDevices(pool)
	if got := deviceNames(devs); !cmp.Equal(got, []string{gpudra.GPUDeviceName(inv.GPUs[0].Minor), gpudra.GPUDeviceName(g.Minor), gpudra.VFIODeviceName(g.Minor)}) {
		t.Fatalf("devices %v, want gpu-%d, gpu-%d, gpu-%d-vfio", got, inv.GPUs[0].Minor, g.Minor, g.Minor)
	}
	consume := []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: one}}
	if devs[0].ConsumesCounters != nil {
		t.Errorf("GPU 0, not passed through, consumes counters %v", devs[0].ConsumesCounters)
	}
	if diff := cmp.Diff(consume, devs[1].ConsumesCounters); diff != "" {
		t.Errorf("GPU 1 consumes (-want +got):\n%s", diff)
	}
	v := devs[2]
	if diff := cmp.Diff(consume, v.ConsumesCounters); diff != "" {
		t.Errorf("vfio device consumes (-want +got):\n%s", diff)
	}
	want := map[resourceapi.QualifiedName]string{gpudra.AttrType: "vfio", gpudra.AttrUUID: g.UUID, gpudra.StdAttrPCIBusID: g.PCIBusID}
	for name, val := range want {
		if a := v.Attributes[name]; a.StringValue == nil || *a.StringValue != val {
			t.Errorf("vfio device attribute %s = %v, want %q", name, a, val)
		}
	}
	if a := v.Attributes[gpudra.AttrIOMMUGroup]; a.IntValue == nil || *a.IntValue != int64(40+g.Minor) {
		t.Errorf("vfio device iommuGroup = %v, want %d", a, 40+g.Minor)
	}
	if v.AllowMultipleAllocations != nil || v.Capacity[gpudra.CapMemory].RequestPolicy != nil {
		t.Errorf("vfio device is shareable: allowMultipleAllocations %v, memory policy %v", v.AllowMultipleAllocations, v.Capacity[gpudra.CapMemory].RequestPolicy)
	}
	if devs[1].AllowMultipleAllocations == nil {
		t.Error("the GPU lost its consumable memory to passthrough")
	}
}

// TestVFIONotBesideStaticMIG: a GPU in static MIG mode is not published for passthrough (its
// instances would make the bind fail); with dynamic MIG the vfio device consumes every counter
// of the GPU, as the full GPU does; WithoutFeatures(FeaturePartitionableDevices) turns it off.
func TestVFIONotBesideStaticMIG(t *testing.T) {
	inv := inventory(t, "dgx-a100-40gb", gputest.WithMIG(0, "1g.5gb"))
	for _, tc := range []struct {
		name string
		opts []gpudra.Option
		want int
	}{
		{"static MIG", nil, 7},
		{"dynamic MIG, foreign instance", []gpudra.Option{gpudra.WithDynamicMIG(nil)}, 7},
		{"dynamic MIG", []gpudra.Option{gpudra.WithDynamicMIG(nil), gpudra.WithDynamicMIGOwned(func(*gpu.GPU, *gpu.MIGDevice) bool { return true })}, 8},
		{"no counters", []gpudra.Option{gpudra.WithoutFeatures(gpudra.FeaturePartitionableDevices)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devs, err := gpudra.NewBuilder(append(tc.opts, gpudra.WithPassthrough(everyGPU))...).Devices(inv)
			if err != nil {
				t.Fatal(err)
			}
			full := map[string][]resourceapi.DeviceCounterConsumption{}
			n := 0
			for _, d := range devs {
				if *d.Attributes[gpudra.AttrType].StringValue == "vfio" {
					n++
					if d.Name == gpudra.VFIODeviceName(inv.GPUs[0].Minor) && tc.want == 7 {
						t.Errorf("GPU 0, with a MIG instance it may not own, published for passthrough")
					}
					full[d.Name] = d.ConsumesCounters
				}
			}
			if n != tc.want {
				t.Errorf("%d vfio devices, want %d", n, tc.want)
			}
			if tc.name != "dynamic MIG" {
				return
			}
			for _, d := range devs {
				if *d.Attributes[gpudra.AttrType].StringValue == "gpu" {
					if diff := cmp.Diff(d.ConsumesCounters, full[d.Name+"-vfio"]); diff != "" {
						t.Errorf("%s-vfio consumes other counters than %s (-gpu +vfio):\n%s", d.Name, d.Name, diff)
					}
				}
			}
		})
	}
}

var minorRE = regexp.MustCompile(`^gpu-(\d+)`)

// TestVFIONeverBesideAContainer runs the scheduler's allocator: virtual-machine claims (vfio
// class) and container claims (gpu class, or MIG partitions) on one node never get the same
// GPU, and together they use every GPU.
func TestVFIONeverBesideAContainer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		machine string
		opts    []gpudra.Option
		classes []string // the claims, in order, repeated until nothing fits
	}{
		{"full GPUs", "dgx-a100-40gb", nil, []string{gpudra.VFIODeviceClassName, gpudra.GPUDeviceClassName}},
		{"consumable memory", "l4x8", []gpudra.Option{gpudra.WithConsumableMemory(gpudra.ConsumableMemory{Default: resourceQtyStr("4Gi")})},
			[]string{gpudra.GPUDeviceClassName, gpudra.GPUDeviceClassName, gpudra.VFIODeviceClassName}},
		{"dynamic MIG", "dgx-h100", []gpudra.Option{gpudra.WithDynamicMIG(nil)},
			[]string{gpudra.MIGDeviceClassName, gpudra.VFIODeviceClassName, gpudra.GPUDeviceClassName}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := inventory(t, tc.machine)
			sim := simulate.New(testNode, selectors.DeviceClasses(""), slicesFor(t, inv, append(tc.opts, gpudra.WithPassthrough(everyGPU))...))
			owner := map[string]string{} // GPU minor → class of the claims on it
			vms := 0
			for n := 0; ; n++ {
				class := tc.classes[n%len(tc.classes)]
				got, err := sim.Allocate(context.Background(), classClaim(n, class))
				if errors.Is(err, simulate.ErrUnschedulable) {
					if class == gpudra.VFIODeviceClassName {
						break
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if n > 200 {
					t.Fatal("more than 200 claims fit")
				}
				for _, r := range got.Status.Allocation.Devices.Results {
					minor := minorRE.FindStringSubmatch(r.Device)[1]
					if prev, ok := owner[minor]; ok && (prev == gpudra.VFIODeviceClassName) != (class == gpudra.VFIODeviceClassName) {
						t.Errorf("claim %d (%s) got %s on GPU %s, which a %s claim has", n, class, r.Device, minor, prev)
					}
					owner[minor] = class
					if class == gpudra.VFIODeviceClassName {
						vms++
					}
				}
			}
			if len(owner) != len(inv.GPUs) || vms == 0 {
				t.Errorf("claims used %d GPUs of %d (%d by virtual machines), want all, some by virtual machines", len(owner), len(inv.GPUs), vms)
			}
		})
	}
}

func classClaim(n int, class string) *resourceapi.ResourceClaim {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if class == gpudra.MIGDeviceClassName {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selectorsProfile("1g.10gb")}}}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", n), Namespace: "default", UID: types.UID(testUID(n))},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &req}}}},
	}
}

func selectorsProfile(p string) string {
	s, err := selectors.For("").Profiles(p)
	if err != nil {
		panic(err)
	}
	return s
}

func poolDevices(p *gpudra.Pool) []resourceapi.Device {
	var out []resourceapi.Device
	for _, s := range p.Slices {
		out = append(out, s.Devices...)
	}
	return out
}

func counterSets(p *gpudra.Pool) []resourceapi.CounterSet {
	var out []resourceapi.CounterSet
	for _, s := range p.Slices {
		out = append(out, s.SharedCounters...)
	}
	return out
}

func deviceNames(devs []resourceapi.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Name
	}
	return out
}

func resourceQty(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }

func resourceQtyStr(s string) resource.Quantity { return resource.MustParse(s) }
