package gpudra_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

var (
	balanced40 = gputest.WithMIGAll("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb")
	balanced80 = gputest.WithMIGAll("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")
	all1g10gb  = gputest.WithMIGAll("1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb")
)

// TestSeedWorkloadsWithRealAllocator feeds the slices and classes the driver publishes for a fake
// machine, and the seed workloads of examples/deploy/workloads, to the scheduler's allocator.
// Each workload must allocate where its manifest says it does and fail where it says it fails.
func TestSeedWorkloadsWithRealAllocator(t *testing.T) {
	type tc struct {
		file      string
		machine   string
		machOpts  []gputest.Option
		buildOpts []gpudra.Option
		// wantFail is the index of the first claim expected not to fit, or -1 for "all fit".
		wantFail int
		check    func(t *testing.T, claims []*resourceapi.ResourceClaim)
	}
	cases := []tc{
		{file: "01-exclusive-gpu.yaml", machine: "dgx-a100-40gb", wantFail: -1, check: devicesPerClaim(1)},
		{file: "02-two-gpus.yaml", machine: "dgx-a100-40gb", wantFail: -1, check: devicesPerClaim(2)},
		{file: "03-time-slicing.yaml", machine: "l4x8", wantFail: -1},
		{file: "04-mps.yaml", machine: "l4x8", wantFail: -1},
		{file: "05-mig-1g.yaml", machine: "dgx-a100-40gb", machOpts: opts(balanced40), wantFail: -1, check: profiles("1g.5gb")},
		{file: "06-mig-2g.yaml", machine: "dgx-a100-40gb", machOpts: opts(balanced40), wantFail: -1, check: profiles("2g.10gb")},
		{file: "07-mig-3g.yaml", machine: "dgx-a100-40gb", machOpts: opts(balanced40), wantFail: -1, check: profiles("3g.20gb")},
		{file: "05-mig-1g.yaml", machine: "dgx-a100-40gb", wantFail: 0}, // no MIG devices without a MIG config
		{file: "08-mig-1g-deployment.yaml", machine: "dgx-a100-40gb", machOpts: opts(balanced40), wantFail: -1, check: profiles("1g.5gb")},
		{file: "09-mig-shared-claim.yaml", machine: "dgx-a100-40gb", machOpts: opts(balanced40), wantFail: -1},
		{file: "10-mig-invalid-profile.yaml", machine: "dgx-a100-40gb", machOpts: opts(balanced40), wantFail: 0},
		{file: "11-mig-80gb-balanced.yaml", machine: "dgx-a100-80gb", machOpts: opts(balanced80), wantFail: -1},
		{file: "12-shared-claim-two-containers.yaml", machine: "dgx-a100-40gb", wantFail: -1, check: devicesPerClaim(1)},
		{file: "13-shared-claim-two-pods.yaml", machine: "dgx-a100-40gb", wantFail: -1, check: devicesPerClaim(1)},
		{file: "14-two-claims-one-container.yaml", machine: "dgx-a100-40gb", wantFail: -1},
		{file: "15-time-slicing-interval.yaml", machine: "dgx-a100-40gb", wantFail: -1},
		{file: "16-mps-limits.yaml", machine: "dgx-a100-40gb", wantFail: -1},
		{file: "17-mig-sharing.yaml", machine: "dgx-a100-40gb", machOpts: opts(balanced40), wantFail: -1, check: profiles("1g.5gb")},
		{file: "18-cel-product-name.yaml", machine: "dgx-a100-80gb", wantFail: -1},
		{file: "18-cel-product-name.yaml", machine: "dgx-h100", wantFail: 0},
		{file: "19-cel-architecture.yaml", machine: "dgx-a100-40gb", wantFail: -1},
		{file: "19-cel-architecture.yaml", machine: "dgx-h100", wantFail: 0},
		{file: "19-cel-architecture.yaml", machine: "l4x8", wantFail: 0},
		{file: "20-cel-compute-capability.yaml", machine: "a10gx4", wantFail: -1},
		{file: "21-cel-driver-versions.yaml", machine: "dgx-a100-40gb", wantFail: -1},
		{file: "22-cel-memory-deviceclass.yaml", machine: "dgx-a100-40gb", wantFail: -1},
		{file: "22-cel-memory-deviceclass.yaml", machine: "l4x8", wantFail: 0},
		{file: "23-cel-small-inference-gpu.yaml", machine: "l4x8", wantFail: 0},
		{file: "23-cel-small-inference-gpu.yaml", machine: "dgx-a100-40gb", wantFail: 0},
		{file: "24-cel-or-expression.yaml", machine: "a10gx4", wantFail: 0},
		{file: "25-cel-mig-model-profile.yaml", machine: "dgx-a100-80gb", machOpts: opts(balanced80), wantFail: -1, check: profiles("3g.40gb")},
		{file: "25-cel-mig-model-profile.yaml", machine: "dgx-a100-40gb", machOpts: opts(balanced40), wantFail: 0},
		{file: "26-mig-option-a.yaml", machine: "dgx-a100-80gb", buildOpts: dynamic, wantFail: -1, check: sameParent},
		{file: "27-mig-option-b.yaml", machine: "dgx-a100-80gb", buildOpts: dynamic, wantFail: -1, check: sameParent},
		{file: "28-mig-option-c.yaml", machine: "dgx-a100-80gb", buildOpts: dynamic, wantFail: -1, check: sameParent},
		{file: "29-mig-option-d.yaml", machine: "dgx-a100-80gb", buildOpts: dynamic, wantFail: -1, check: sameParent},
		{file: "30-mig-option-e.yaml", machine: "dgx-a100-80gb", buildOpts: dynamic, wantFail: -1, check: sameParent},
		{file: "26-mig-option-a.yaml", machine: "dgx-a100-80gb", machOpts: opts(balanced80), wantFail: 0},
		{file: "31-mig-invalid-layout.yaml", machine: "dgx-a100-80gb", buildOpts: dynamic, wantFail: 0},
		{file: "05-mig-1g.yaml", machine: "dgx-a100-40gb", buildOpts: dynamic, wantFail: -1, check: profiles("1g.5gb")},
		{file: "01-exclusive-gpu.yaml", machine: "dgx-h100", buildOpts: dynamic, wantFail: -1, check: devicesPerClaim(1)},
		{file: "34-consumable-memory.yaml", machine: "dgx-h100", buildOpts: []gpudra.Option{gpudra.WithConsumableMemory(gpudra.ConsumableMemory{})}, wantFail: -1, check: sharedGPUs},
		{file: "32-multi-gpu-numa.yaml", machine: "dgx-h100", wantFail: -1, check: devicesPerClaim(4)},
		{file: "33-two-gpus-same-pcie-root.yaml", machine: "dgx-a100-40gb", wantFail: -1, check: devicesPerClaim(2)},
		{file: "33-two-gpus-same-pcie-root.yaml", machine: "dgx-h100", wantFail: 0}, // one PCIe root per GPU
		{file: "35-time-slicing-deployments.yaml", machine: "l4x8", wantFail: -1},
		{file: "36-prioritized-list.yaml", machine: "dgx-a100-80gb", wantFail: -1},
		{file: "36-prioritized-list.yaml", machine: "dgx-a100-80gb", machOpts: opts(all1g10gb), wantFail: 0},
		// Topology (issue 18): the facts are NVIDIA's (docs/hardware.md), not the code's.
		{file: "32-multi-gpu-numa.yaml", machine: "l4x8", wantFail: -1, check: sameGroup(4, "numaNode", [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}})},
		{file: "33-two-gpus-same-pcie-root.yaml", machine: "l4x8", wantFail: -1, check: sameGroup(2, "pcieRoot", [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}})},
		{file: "37-two-gpus-one-nvlink-island.yaml", machine: "a30x4", wantFail: -1, check: sameGroup(2, "NVLink island", [][]int{{0, 1}, {2, 3}})},
		{file: "37-two-gpus-one-nvlink-island.yaml", machine: "a30x4", machOpts: opts(gputest.WithNVLinkBridges([2]int{0, 3}, [2]int{1, 2})), wantFail: -1, check: sameGroup(2, "NVLink island", [][]int{{0, 3}, {1, 2}})},
		{file: "37-two-gpus-one-nvlink-island.yaml", machine: "dgx-a100-40gb", wantFail: -1, check: devicesPerClaim(2)},
		{file: "37-two-gpus-one-nvlink-island.yaml", machine: "l4x8", wantFail: 0},
		{file: "37-two-gpus-one-nvlink-island.yaml", machine: "a10gx4", wantFail: 0},
		{file: "38-eight-gpus-one-nvlink-island.yaml", machine: "dgx-a100-40gb", wantFail: -1, check: devicesPerClaim(8)},
		{file: "38-eight-gpus-one-nvlink-island.yaml", machine: "dgx-a100-80gb", wantFail: -1, check: devicesPerClaim(8)},
		{file: "38-eight-gpus-one-nvlink-island.yaml", machine: "dgx-h100", wantFail: -1, check: devicesPerClaim(8)},
		{file: "38-eight-gpus-one-nvlink-island.yaml", machine: "dgx-h200", wantFail: -1, check: devicesPerClaim(8)},
		{file: "38-eight-gpus-one-nvlink-island.yaml", machine: "dgx-b200", wantFail: -1, check: devicesPerClaim(8)},
		{file: "38-eight-gpus-one-nvlink-island.yaml", machine: "a30x4", wantFail: 0},
		{file: "38-eight-gpus-one-nvlink-island.yaml", machine: "gb200-nvl4", wantFail: 0},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s/%s", c.file, c.machine)
		if len(c.machOpts) > 0 {
			name += "+mig"
		}
		t.Run(name, func(t *testing.T) {
			inv, topo := inventoryAndTopology(t, c.machine, c.machOpts...)
			// As the reference driver publishes them: PCIe roots and the topology attributes.
			slices := slicesFor(t, inv, append([]gpudra.Option{gpudra.WithPCIeRoot(topo.PCIeRoot), gpudra.WithTopology(topo)}, c.buildOpts...)...)
			w := loadWorkload(t, workloadPath(c.file))
			if len(w.Claims) == 0 {
				t.Fatalf("%s has no claims", c.file)
			}
			classes := append(selectors.DeviceClasses(gpudra.DefaultDriverName), w.Classes...)
			sim := simulate.New(testNode, classes, slices)
			var got []*resourceapi.ResourceClaim
			failed := -1
			for i, claim := range w.Claims {
				allocated, err := sim.Allocate(context.Background(), claim)
				if errors.Is(err, simulate.ErrUnschedulable) {
					failed = i
					break
				}
				if err != nil {
					t.Fatalf("claim %d (%s): %v", i, claim.Name, err)
				}
				got = append(got, allocated)
			}
			if failed != c.wantFail {
				t.Fatalf("first unschedulable claim = %d, want %d (-1: all %d fit)", failed, c.wantFail, len(w.Claims))
			}
			if c.check != nil {
				c.check(t, got)
			}
		})
	}
}

var dynamic = []gpudra.Option{gpudra.WithDynamicMIG(nil)}

// sameParent checks that all devices of each claim are MIG devices of one physical GPU.
func sameParent(t *testing.T, claims []*resourceapi.ResourceClaim) {
	t.Helper()
	for _, c := range claims {
		parents := map[int]bool{}
		for _, r := range c.Status.Allocation.Devices.Results {
			n, err := gpudra.ParseMIGDeviceName(r.Device)
			if err != nil {
				t.Fatalf("claim %s: %v", c.Name, err)
			}
			parents[n.ParentMinor] = true
		}
		if len(parents) != 1 {
			t.Errorf("claim %s spans GPUs %v, want one", c.Name, parents)
		}
	}
}

// sharedGPUs checks that consumable-memory claims got shares (ShareID set) and that at least one
// GPU carries more than one claim.
func sharedGPUs(t *testing.T, claims []*resourceapi.ResourceClaim) {
	t.Helper()
	perDevice := map[string]int{}
	for _, c := range claims {
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.ShareID == nil {
				t.Errorf("claim %s device %s has no share ID", c.Name, r.Device)
			}
			perDevice[r.Device]++
		}
	}
	if len(perDevice) >= len(claims) {
		t.Errorf("claims were spread over %d GPUs, want some GPU shared: %v", len(perDevice), perDevice)
	}
}

func opts(o ...gputest.Option) []gputest.Option { return o }

func devicesPerClaim(n int) func(t *testing.T, claims []*resourceapi.ResourceClaim) {
	return func(t *testing.T, claims []*resourceapi.ResourceClaim) {
		t.Helper()
		for _, c := range claims {
			if got := len(c.Status.Allocation.Devices.Results); got != n {
				t.Errorf("claim %s got %d devices, want %d", c.Name, got, n)
			}
		}
	}
}

// profiles checks that every allocated device is a MIG device with the given profile, by looking
// the device up in the published slices' naming scheme.
func profiles(profile string) func(t *testing.T, claims []*resourceapi.ResourceClaim) {
	return func(t *testing.T, claims []*resourceapi.ResourceClaim) {
		t.Helper()
		for _, c := range claims {
			for _, r := range c.Status.Allocation.Devices.Results {
				n, err := gpudra.ParseMIGDeviceName(r.Device)
				if err != nil {
					t.Errorf("claim %s: %v", c.Name, err)
					continue
				}
				want := gpudra.MIGDeviceName(gpudra.MIGName{ParentMinor: n.ParentMinor, Profile: profile, GIProfileID: n.GIProfileID, PlacementStart: n.PlacementStart})
				if r.Device != want {
					t.Errorf("claim %s got device %s, want profile %s", c.Name, r.Device, profile)
				}
			}
		}
	}
}

// sameGroup checks that every claim got n GPUs, all from one of groups (GPU indexes, named by
// what they share), as the machine's published layout says.
func sameGroup(n int, what string, groups [][]int) func(t *testing.T, claims []*resourceapi.ResourceClaim) {
	return func(t *testing.T, claims []*resourceapi.ResourceClaim) {
		t.Helper()
		for _, c := range claims {
			var got []int
			for _, r := range c.Status.Allocation.Devices.Results {
				var minor int
				if _, err := fmt.Sscanf(r.Device, "gpu-%d", &minor); err != nil {
					t.Fatalf("claim %s: device %s is not a full GPU", c.Name, r.Device)
				}
				got = append(got, minor)
			}
			ok := len(got) == n
			for _, g := range groups {
				if ok && containsAll(g, got) {
					return
				}
			}
			t.Errorf("claim %s got GPUs %v, want %d GPUs of one %s of %v", c.Name, got, n, what, groups)
		}
	}
}

func containsAll(set, xs []int) bool {
	for _, x := range xs {
		if !slices.Contains(set, x) {
			return false
		}
	}
	return true
}
