package gpudra_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

// oneGPU is an inventory with a single MIG-capable GPU of a catalog model, MIG mode off. The
// builder only reads inventory values, so models without a fake machine are covered too.
func oneGPU(m *mig.Model) *gpu.Inventory {
	return &gpu.Inventory{DriverVersion: "580.126.9", CUDADriverVersion: "13.0.0", GPUs: []gpu.GPU{{
		UUID: "GPU-00000000-0000-4000-8000-000000000000", ProductName: "NVIDIA " + m.ProductNames[0],
		Architecture: m.Architecture, CudaComputeCapability: m.CudaComputeCapability + ".0",
		MemoryBytes: m.MemoryMiB << 20, Multiprocessors: m.Multiprocessors, PCIBusID: "0000:07:00.0",
		NUMANode: -1, MIGCapable: true,
	}}}
}

func migClaim(n int, profile string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", n), Namespace: "default", UID: types.UID(testUID(n))},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "mig",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: gpudra.MIGDeviceClassName,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf("device.attributes['gpu.nvidia.com'].profile == '%s'", profile),
				}}},
			},
		}}}},
	}
}

// placementOf recovers the (profile, placement) of a dynamic MIG device from its name.
func placementOf(t *testing.T, m *mig.Model, device string) mig.Instance {
	t.Helper()
	n, err := gpudra.ParseMIGDeviceName(device)
	if err != nil {
		t.Fatalf("allocated device %s is not a MIG device: %v", device, err)
	}
	for _, p := range m.Profiles {
		if p.ID == n.GIProfileID && gpudra.MIGDeviceName(gpudra.MIGName{ParentMinor: n.ParentMinor, Profile: p.Name, GIProfileID: p.ID, PlacementStart: n.PlacementStart}) == device {
			return mig.At(p.Name, n.PlacementStart)
		}
	}
	t.Fatalf("device %s matches no profile of %s", device, m.Name)
	return mig.Instance{}
}

// TestDynamicMIGAllocationsAreValidLayouts drives the scheduler's allocator with random sequences
// of MIG claims (and releases) on every catalog model. Whatever it picks must be a layout that
// mig.Validate accepts, and whenever it refuses a profile, the planner must agree that the
// profile does not fit: the counters neither allow invalid layouts nor forbid valid ones.
func TestDynamicMIGAllocationsAreValidLayouts(t *testing.T) {
	const rounds, steps = 12, 24
	for _, m := range mig.Models() {
		t.Run(m.Name, func(t *testing.T) {
			slices := slicesFor(t, oneGPU(m), gpudra.WithDynamicMIG(nil))
			rng := rand.New(rand.NewPCG(uint64(len(m.Name)), 42))
			checked := 0
			for round := 0; round < rounds; round++ {
				sim := simulate.New(testNode, selectors.DeviceClasses(""), slices)
				var held []*resourceapi.ResourceClaim
				var layout []mig.Instance
				for step := 0; step < steps; step++ {
					if len(held) > 0 && rng.IntN(4) == 0 {
						i := rng.IntN(len(held))
						sim.Release(held[i])
						held = append(held[:i], held[i+1:]...)
						layout = append(layout[:i], layout[i+1:]...)
						continue
					}
					p := m.Profiles[rng.IntN(len(m.Profiles))].Name
					got, err := sim.Allocate(context.Background(), migClaim(round*100+step, p))
					_, planErr := mig.Plan(m, layout, []string{p})
					switch {
					case errors.Is(err, simulate.ErrUnschedulable):
						if planErr == nil {
							t.Fatalf("allocator refused %s beside %s, but the planner fits it", p, mig.FormatLayout(layout))
						}
					case err != nil:
						t.Fatal(err)
					default:
						in := placementOf(t, m, got.Status.Allocation.Devices.Results[0].Device)
						next := append(append([]mig.Instance(nil), layout...), in)
						if _, verr := mig.Validate(m, next); verr != nil {
							t.Fatalf("allocator produced an invalid layout %s: %v", mig.FormatLayout(next), verr)
						}
						held = append(held, got)
						layout = next
					}
					checked++
				}
			}
			t.Logf("%s: %d allocation steps checked", m.Name, checked)
		})
	}
}

// TestDynamicMIGFullGPUExcludesPartitions checks the full GPU consumes the whole counter set.
func TestDynamicMIGFullGPUExcludesPartitions(t *testing.T) {
	m, err := mig.Lookup("A100-SXM4-40GB")
	if err != nil {
		t.Fatal(err)
	}
	sim := simulate.New(testNode, selectors.DeviceClasses(""), slicesFor(t, oneGPU(m), gpudra.WithDynamicMIG(nil)))
	full := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "full", Namespace: "default", UID: types.UID(testUID(999))},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpudra.GPUDeviceClassName},
		}}}},
	}
	got, err := sim.Allocate(context.Background(), full)
	if err != nil {
		t.Fatalf("full GPU: %v", err)
	}
	if _, err := sim.Allocate(context.Background(), migClaim(1, "1g.5gb")); !errors.Is(err, simulate.ErrUnschedulable) {
		t.Fatalf("MIG device allocated beside the full GPU: %v", err)
	}
	sim.Release(got)
	if _, err := sim.Allocate(context.Background(), migClaim(2, "1g.5gb")); err != nil {
		t.Fatalf("MIG device after releasing the full GPU: %v", err)
	}
	if _, err := sim.Allocate(context.Background(), full); !errors.Is(err, simulate.ErrUnschedulable) {
		t.Fatalf("full GPU allocated beside a MIG device: %v", err)
	}
}

// TestDynamicMIGFirstFitKeepsLargeRegionsFree: the allocator is first-fit, so the publishing
// order decides placements. A lone 1g.5gb must land where mig.Plan puts it (the last slice), so
// that a 4g.20gb still fits beside it afterwards.
func TestDynamicMIGFirstFitKeepsLargeRegionsFree(t *testing.T) {
	m, err := mig.Lookup("A100-SXM4-40GB")
	if err != nil {
		t.Fatal(err)
	}
	sim := simulate.New(testNode, selectors.DeviceClasses(""), slicesFor(t, oneGPU(m), gpudra.WithDynamicMIG(nil)))
	got, err := sim.Allocate(context.Background(), migClaim(1, "1g.5gb"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := mig.Plan(m, nil, []string{"1g.5gb"})
	if err != nil {
		t.Fatal(err)
	}
	if in := placementOf(t, m, got.Status.Allocation.Devices.Results[0].Device); in.String() != want[0].String() {
		t.Errorf("first 1g.5gb placed at %s, want %s (mig.Plan's choice)", in, want[0])
	}
	for _, p := range []string{"4g.20gb", "2g.10gb"} {
		if _, err := sim.Allocate(context.Background(), migClaim(2, p)); err != nil {
			t.Errorf("%s after one 1g.5gb: %v", p, err)
		}
	}
}

// TestConsumableMemoryNeverOvercommits fills a DGX H100 published with consumable memory with
// claims of random sizes: every GPU's allocated memory stays within its capacity, and the
// allocator refuses a claim only when no GPU has room for it.
func TestConsumableMemoryNeverOvercommits(t *testing.T) {
	inv := inventory(t, "dgx-h100")
	slices := slicesFor(t, inv, gpudra.WithConsumableMemory(gpudra.ConsumableMemory{}))
	capacity := map[string]int64{}
	for _, d := range allDevices(slices) {
		policy := d.Capacity["memory"].RequestPolicy
		if policy == nil || policy.ValidRange == nil || d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			t.Fatalf("device %s is not shareable by memory", d.Name)
		}
		capacity[d.Name] = policy.ValidRange.Max.Value()
	}
	sim := simulate.New(testNode, selectors.DeviceClasses(""), slices)
	used := map[string]int64{}
	rng := rand.New(rand.NewPCG(7, 11))
	refused := 0
	for i := 0; i < 200; i++ {
		gib := int64(1 + rng.IntN(40))
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m%d", i), Namespace: "default", UID: types.UID(testUID(i))},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpudra.GPUDeviceClassName,
					Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
						"memory": *resource.NewQuantity(gib<<30, resource.BinarySI)}}},
			}}}},
		}
		got, err := sim.Allocate(context.Background(), claim)
		if errors.Is(err, simulate.ErrUnschedulable) {
			refused++
			for dev, c := range capacity {
				if c-used[dev] >= gib<<30 {
					t.Fatalf("claim of %dGi refused while %s has %dGi free", gib, dev, (c-used[dev])>>30)
				}
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		r := got.Status.Allocation.Devices.Results[0]
		consumed := r.ConsumedCapacity["memory"]
		used[r.Device] += consumed.Value()
		if used[r.Device] > capacity[r.Device] {
			t.Fatalf("%s over-committed: %d of %d bytes", r.Device, used[r.Device], capacity[r.Device])
		}
	}
	if refused == 0 {
		t.Fatal("200 claims of up to 40Gi fit on 8 GPUs: the test never reached full GPUs")
	}
}

// TestDynamicMIGProfilesPublishesOnlyThose: with WithDynamicMIGProfiles, a DGX A100 40GB node
// publishes its 8 full GPUs and, per GPU, the placements of the listed profiles only. The
// placement counts are NVIDIA's (MIG user guide, A100-40GB: seven 1g.5gb, three 2g.10gb, two
// 3g.20gb, one 7g.40gb); a name no GPU knows adds nothing.
func TestDynamicMIGProfilesPublishesOnlyThose(t *testing.T) {
	inv := inventory(t, "dgx-a100-40gb")
	b := gpudra.NewBuilder(gpudra.WithDynamicMIG(nil), gpudra.WithDynamicMIGProfiles("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb", "9g.99gb"))
	devs, err := b.Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, d := range devs {
		key := *d.Attributes[gpudra.AttrType].StringValue
		if p, ok := d.Attributes[gpudra.AttrProfile]; ok {
			key = *p.StringValue
		}
		got[key]++
	}
	want := map[string]int{"gpu": 8, "1g.5gb": 8 * 7, "2g.10gb": 8 * 3, "3g.20gb": 8 * 2, "7g.40gb": 8 * 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("devices by profile (-want +got):\n%s", diff)
	}
}
