package gpudra_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
	"github.com/gpudra/gpudra/topology"
)

// nvidiaIslands are the NVLink-connected GPU groups of NVIDIA's systems that the fake machines
// model (docs/hardware.md): a DGX's eight GPUs behind one set of NVSwitches, a GB200 tray's four
// GPUs on the rack's NVLink switches, A30 cards in pairs on NVLink bridges, none on PCIe-only
// servers.
var nvidiaIslands = map[string][][]int{
	"dgx-a100-40gb": {{0, 1, 2, 3, 4, 5, 6, 7}}, "dgx-a100-80gb": {{0, 1, 2, 3, 4, 5, 6, 7}},
	"dgx-h100": {{0, 1, 2, 3, 4, 5, 6, 7}}, "dgx-h200": {{0, 1, 2, 3, 4, 5, 6, 7}}, "dgx-b200": {{0, 1, 2, 3, 4, 5, 6, 7}},
	"gb200-nvl4": {{0, 1, 2, 3}}, "a30x4": {{0, 1}, {2, 3}},
	"l4x8": nil, "a10gx4": nil, "rtx-pro-6000x4": nil,
}

// topoDevices publishes a fake machine as the reference driver does (PCIe roots and topology).
func topoDevices(t *testing.T, machine string, mopts []gputest.Option, bopts ...gpudra.Option) ([]resourceapi.Device, *gpu.Inventory) {
	t.Helper()
	inv, topo := inventoryAndTopology(t, machine, mopts...)
	b := gpudra.NewBuilder(append([]gpudra.Option{gpudra.WithPCIeRoot(topo.PCIeRoot), gpudra.WithTopology(topo)}, bopts...)...)
	devs, err := b.Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	return devs, inv
}

func strAttr(d *resourceapi.Device, name resourceapi.QualifiedName) (string, bool) {
	a, ok := d.Attributes[name]
	if !ok || a.StringValue == nil {
		return "", false
	}
	return *a.StringValue, true
}

// gpuIndexOf is the index of a full GPU, or the parentIndex of a MIG device.
func gpuIndexOf(d *resourceapi.Device) int {
	if a, ok := d.Attributes[gpudra.AttrParentIndex]; ok {
		return int(*a.IntValue)
	}
	return int(*d.Attributes[gpudra.AttrIndex].IntValue)
}

// TestTopologyAttributes: on every fake machine each GPU's nvlinkIsland names its group of
// NVIDIA's layout (one value per group, distinct across groups, the group's lowest PCI bus ID,
// absent on PCIe-only GPUs); nvlinkDomain is what NVML's fabric info says (GB200 only);
// pcieSwitch is absent (every PCIe switch of the fakes holds all the GPUs of its root); and no
// list attribute appears without WithListAttributes.
func TestTopologyAttributes(t *testing.T) {
	for _, name := range gputest.Machines() {
		t.Run(name, func(t *testing.T) {
			want, ok := nvidiaIslands[name]
			if !ok {
				t.Fatalf("no published layout for %s", name)
			}
			devs, inv := topoDevices(t, name, nil)
			machine, err := gputest.New(name)
			if err != nil {
				t.Fatal(err)
			}
			wantIsland := map[int]string{}
			for _, g := range want {
				var bus []string
				for _, i := range g {
					bus = append(bus, inv.GPUs[i].PCIBusID)
				}
				for _, i := range g {
					wantIsland[i] = slices.Min(bus)
				}
			}
			for i := range devs {
				d := &devs[i]
				idx := gpuIndexOf(d)
				got, _ := strAttr(d, gpudra.AttrNVLinkIsland)
				if got != wantIsland[idx] {
					t.Errorf("%s (GPU %d): nvlinkIsland %q, want %q", d.Name, idx, got, wantIsland[idx])
				}
				wantDomain := ""
				if f, ret := machine.Device(idx).GetGpuFabricInfo(); ret == nvml.SUCCESS && f.State == nvml.GPU_FABRIC_STATE_COMPLETED {
					wantDomain = fmt.Sprintf("%s.%d", uuid.UUID(f.ClusterUuid), f.CliqueId)
				}
				if got, _ := strAttr(d, gpudra.AttrNVLinkDomain); got != wantDomain {
					t.Errorf("%s: nvlinkDomain %q, want %q", d.Name, got, wantDomain)
				}
				if got, ok := strAttr(d, gpudra.AttrPCIeSwitch); ok {
					t.Errorf("%s: pcieSwitch %q, want none", d.Name, got)
				}
				if _, ok := d.Attributes[gpudra.AttrNVLinkCliques]; ok {
					t.Errorf("%s: list attribute without WithListAttributes", d.Name)
				}
			}
		})
	}
}

// TestMIGDevicesInheritTopology: static MIG devices and dynamic MIG partitions carry their
// GPU's topology attributes.
func TestMIGDevicesInheritTopology(t *testing.T) {
	cases := []struct {
		machine string
		mopts   []gputest.Option
		bopts   []gpudra.Option
	}{
		{"a30x4", opts(gputest.WithMIGConfig("all-balanced")), nil},
		{"a30x4", nil, dynamic},
		{"gb200-nvl4", nil, dynamic},
		{"dgx-h100", opts(gputest.WithMIGConfig("all-balanced")), nil},
	}
	for _, tc := range cases {
		devs, _ := topoDevices(t, tc.machine, tc.mopts, tc.bopts...)
		// The full GPUs of the same hardware (a MIG-enabled GPU is not published whole).
		full, _ := topoDevices(t, tc.machine, nil)
		gpus := map[int]*resourceapi.Device{}
		for i := range full {
			gpus[gpuIndexOf(&full[i])] = &full[i]
		}
		migs := 0
		for i := range devs {
			d := &devs[i]
			if _, mig := d.Attributes[gpudra.AttrParentIndex]; !mig {
				continue
			}
			migs++
			parent := gpus[gpuIndexOf(d)]
			for _, a := range []resourceapi.QualifiedName{gpudra.AttrNVLinkIsland, gpudra.AttrNVLinkDomain, gpudra.StdAttrPCIeRoot, gpudra.StdAttrNUMANode} {
				if diff := cmp.Diff(parent.Attributes[a], d.Attributes[a]); diff != "" {
					t.Errorf("%s %s: %s differs from its GPU's (-gpu +mig):\n%s", tc.machine, d.Name, a, diff)
				}
			}
			if _, ok := d.Attributes[gpudra.AttrNVLinkIsland]; !ok {
				t.Errorf("%s %s: no nvlinkIsland", tc.machine, d.Name)
			}
		}
		if migs == 0 {
			t.Errorf("%s: no MIG devices published", tc.machine)
		}
	}
}

// permuted returns t with its GPUs in another order (p[k] is the old index of new GPU k): the
// same hardware enumerated differently.
func permuted(t *topology.Topology, p []int) *topology.Topology {
	n := len(p)
	out := &topology.Topology{GPUs: make([]topology.GPU, n), Links: make([][]topology.Link, n)}
	for k := range n {
		out.GPUs[k] = t.GPUs[p[k]]
		out.GPUs[k].Index = k
		out.GPUs[k].Peers = nil
		out.Links[k] = make([]topology.Link, n)
		for l := range n {
			out.Links[k][l] = t.Links[p[k]][p[l]]
		}
	}
	return out
}

// topoAttrs are the topology attributes of every device by name.
func topoAttrs(devs []resourceapi.Device) map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for _, d := range devs {
		out[d.Name] = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
		for _, a := range []resourceapi.QualifiedName{gpudra.AttrNVLinkIsland, gpudra.AttrNVLinkDomain, gpudra.AttrPCIeSwitch, gpudra.AttrNVLinkCliques, gpudra.StdAttrPCIeRoot} {
			if v, ok := d.Attributes[a]; ok {
				out[d.Name][a] = v
			}
		}
	}
	return out
}

// TestTopologyAttributesAreStable: the values depend on the hardware, not on the order NVML
// enumerates it in nor on the process: a second discovery (a restart) and every reordering of
// the topology's GPUs publish the same attributes for the same devices.
func TestTopologyAttributesAreStable(t *testing.T) {
	for _, tc := range []struct {
		machine string
		mopts   []gputest.Option
	}{{"a30x4", nil}, {"a30x4", opts(gputest.WithNVLinkBridges([2]int{0, 3}))}, {"gb200-nvl4", nil}, {"dgx-a100-40gb", nil}} {
		inv, topo := inventoryAndTopology(t, tc.machine, tc.mopts...)
		build := func(topo *topology.Topology) map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
			devs, err := gpudra.NewBuilder(gpudra.WithTopology(topo), gpudra.WithListAttributes()).Devices(inv)
			if err != nil {
				t.Fatal(err)
			}
			return topoAttrs(devs)
		}
		want := build(topo)
		_, again := inventoryAndTopology(t, tc.machine, tc.mopts...)
		if diff := cmp.Diff(want, build(again)); diff != "" {
			t.Errorf("%s: a second discovery publishes other values (-first +second):\n%s", tc.machine, diff)
		}
		n := len(topo.GPUs)
		for _, p := range [][]int{reversed(n), rotated(n)} {
			if diff := cmp.Diff(want, build(permuted(topo, p))); diff != "" {
				t.Errorf("%s: GPUs enumerated as %v publish other values (-index order +permuted):\n%s", tc.machine, p, diff)
			}
		}
	}
}

func reversed(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = n - 1 - i
	}
	return out
}

func rotated(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (i + 1) % n
	}
	return out
}

// socketRootedL4 is the l4x8 fake as a server whose PCIe switches hang off one root complex per
// CPU socket: PIX within a switch pair, PHB between the switches of one root, SYS across sockets.
func socketRootedL4(t *testing.T) (*gpu.Inventory, *topology.Topology) {
	t.Helper()
	inv, topo := inventoryAndTopology(t, "l4x8")
	for i := range topo.GPUs {
		topo.GPUs[i].PCIeRoot = []string{"pci0000:30", "pci0000:b0"}[i/4]
		for j := range topo.GPUs {
			switch {
			case i == j:
			case i/2 == j/2:
				topo.Links[i][j].PCIe = topology.LevelPIX
			case i/4 == j/4:
				topo.Links[i][j].PCIe = topology.LevelPHB
			default:
				topo.Links[i][j].PCIe = topology.LevelSys
			}
		}
	}
	return inv, topo
}

// TestPCIeSwitchWhereItDiffersFromTheRoot: where a root complex has GPUs behind several PCIe
// switches, each GPU names its switch (the lowest bus ID behind it) and the root is the
// topology's unless WithPCIeRoot says otherwise.
func TestPCIeSwitchWhereItDiffersFromTheRoot(t *testing.T) {
	inv, topo := socketRootedL4(t)
	devs, err := gpudra.NewBuilder(gpudra.WithTopology(topo)).Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	for i := range devs {
		d := &devs[i]
		idx := gpuIndexOf(d)
		pair := idx &^ 1
		want := slices.Min([]string{inv.GPUs[pair].PCIBusID, inv.GPUs[pair+1].PCIBusID})
		if got, _ := strAttr(d, gpudra.AttrPCIeSwitch); got != want {
			t.Errorf("%s: pcieSwitch %q, want %q", d.Name, got, want)
		}
		if got, _ := strAttr(d, gpudra.StdAttrPCIeRoot); got != topo.GPUs[idx].PCIeRoot {
			t.Errorf("%s: pcieRoot %q, want the topology's %q", d.Name, got, topo.GPUs[idx].PCIeRoot)
		}
	}
	own, err := gpudra.NewBuilder(gpudra.WithTopology(topo), gpudra.WithPCIeRoot(func(bus string) string { return "pci-" + bus })).Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := strAttr(&own[0], gpudra.StdAttrPCIeRoot); got != "pci-"+inv.GPUs[gpuIndexOf(&own[0])].PCIBusID {
		t.Errorf("WithPCIeRoot does not take precedence: %q", got)
	}
}

// cubeMesh gives topo the NVLink shape of a DGX-1 (V100), the hybrid cube-mesh: two quads of
// GPUs (0-3, 4-7) linked all to all within, plus links from each GPU to its counterpart in the
// other quad (GPU 0 to 4, 1 to 5, as in the DGX-1 topology of github.com/NVIDIA/nccl issue 671). Every GPU is on one island, but only a quad is
// linked all to all.
func cubeMesh(topo *topology.Topology) {
	for i := range topo.GPUs {
		for j := range topo.GPUs {
			topo.Links[i][j].NVLinks = 0
			if i != j && (i/4 == j/4 || i%4 == j%4) {
				topo.Links[i][j].NVLinks = 1
			}
		}
	}
}

// TestListAttributesDescribeAMesh: with WithListAttributes every GPU lists the NVLink cliques it
// belongs to, and the allocator with list-typed attributes (KEP-5491, alpha) gives a claim for
// four GPUs matched on nvlinkCliques only GPUs linked all to all, whichever GPU is taken
// first; matched on the island it does not. Without the option no device has a list attribute.
func TestListAttributesDescribeAMesh(t *testing.T) {
	inv, topo := inventoryAndTopology(t, "dgx-a100-40gb")
	cubeMesh(topo)
	linked := func(set []int) bool {
		for _, i := range set {
			for _, j := range set {
				if i != j && topo.Links[i][j].NVLinks == 0 {
					return false
				}
			}
		}
		return true
	}
	plain := slicesFor(t, inv, gpudra.WithTopology(topo))
	for _, d := range allDevices(plain) {
		if _, ok := d.Attributes[gpudra.AttrNVLinkCliques]; ok {
			t.Fatalf("%s has nvlinkCliques without WithListAttributes", d.Name)
		}
	}
	withLists := slicesFor(t, inv, gpudra.WithTopology(topo), gpudra.WithListAttributes())
	for _, d := range allDevices(withLists) {
		// Each GPU is in its quad and in one cross pair: two cliques.
		if got := len(d.Attributes[gpudra.AttrNVLinkCliques].StringValues); got != 2 {
			t.Errorf("%s lists %d cliques, want 2", d.Name, got)
		}
	}
	features := simulate.DefaultFeatures()
	features.ListTypeAttributes = true
	islandSplits := 0
	for taken := range 8 {
		for _, attr := range []resourceapi.QualifiedName{gpudra.AttrNVLinkCliques, gpudra.AttrNVLinkIsland} {
			sim := simulate.New(testNode, selectors.DeviceClasses(""), withLists, simulate.WithFeatures(features))
			if _, err := sim.Allocate(context.Background(), claimFor(1, 1, fmt.Sprintf("device.attributes['gpu.nvidia.com'].index == %d", taken), "")); err != nil {
				t.Fatal(err)
			}
			got, err := sim.Allocate(context.Background(), claimFor(2, 4, "", gpudra.DefaultDriverName+"/"+string(attr)))
			if err != nil {
				t.Fatalf("GPU %d taken: 4 GPUs on %s: %v", taken, attr, err)
			}
			var set []int
			for _, r := range got.Status.Allocation.Devices.Results {
				var minor int
				if _, err := fmt.Sscanf(r.Device, "gpu-%d", &minor); err != nil {
					t.Fatalf("%s is not a full GPU", r.Device)
				}
				set = append(set, minor)
			}
			switch {
			case attr == gpudra.AttrNVLinkCliques && !linked(set):
				t.Errorf("GPU %d taken: 4 GPUs on one clique got %v, not all linked", taken, set)
			case attr == gpudra.AttrNVLinkIsland && !linked(set):
				islandSplits++
			}
		}
	}
	if islandSplits == 0 {
		t.Errorf("the island alone always gave fully linked GPUs on a cube mesh: the list form shows nothing")
	}
}

// claimFor asks for count full GPUs matching expr (when set), all with the same attr (when set).
func claimFor(uid, count int, expr string, attr string) *resourceapi.ResourceClaim {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: gpudra.GPUDeviceClassName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(count)}
	if expr != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}
	}
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", uid), Namespace: "default", UID: types.UID(testUID(uid))},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpus", Exactly: &req}}}},
	}
	if attr != "" {
		c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{selectors.MatchAttribute(resourceapi.FullyQualifiedName(attr))}
	}
	return c
}

// gpuOrder is the order of the GPUs whose devices are published, each GPU once.
func gpuOrder(devs []resourceapi.Device) []int {
	var out []int
	for i := range devs {
		idx := gpuIndexOf(&devs[i])
		if len(out) == 0 || out[len(out)-1] != idx {
			out = append(out, idx)
		}
	}
	return out
}

// TestPublishingOrder: with WithTopology, GPUs on no NVLink island come first, then islands from
// the smallest, each island's GPUs (and their MIG devices) together; NVML numbers GPUs in bus
// order, which on NVIDIA's systems keeps each island together, so the fakes keep the index
// order. A GPU the topology does not know comes last, without topology attributes.
func TestPublishingOrder(t *testing.T) {
	for _, name := range gputest.Machines() {
		devs, inv := topoDevices(t, name, nil)
		if got := gpuOrder(devs); !slices.Equal(got, seq(len(inv.GPUs))) {
			t.Errorf("%s: GPUs published in order %v, want the index order", name, got)
		}
	}
	cases := []struct {
		name  string
		mopts []gputest.Option
		want  []int
	}{
		{"crossed bridges 0-2 1-3", opts(gputest.WithNVLinkBridges([2]int{0, 2}, [2]int{1, 3})), []int{0, 2, 1, 3}},
		{"crossed bridges 0-2 1-3, static MIG", opts(gputest.WithNVLinkBridges([2]int{0, 2}, [2]int{1, 3}), gputest.WithMIGConfig("all-balanced")), []int{0, 2, 1, 3}},
		{"one bridge 0-1", opts(gputest.WithNVLinkBridges([2]int{0, 1})), []int{2, 3, 0, 1}},
		{"one bridge 1-2", opts(gputest.WithNVLinkBridges([2]int{1, 2})), []int{0, 3, 1, 2}},
	}
	for _, tc := range cases {
		devs, _ := topoDevices(t, "a30x4", tc.mopts)
		if got := gpuOrder(devs); !slices.Equal(got, tc.want) {
			t.Errorf("a30x4 %s: GPUs published in order %v, want %v", tc.name, got, tc.want)
		}
	}
	// The first fit of a claim for two GPUs takes a bridged pair on crossed bridges.
	inv, topo := inventoryAndTopology(t, "a30x4", gputest.WithNVLinkBridges([2]int{0, 2}, [2]int{1, 3}))
	for _, tc := range []struct {
		bopts []gpudra.Option
		want  []string
	}{{nil, []string{"gpu-0", "gpu-1"}}, {[]gpudra.Option{gpudra.WithTopology(topo)}, []string{"gpu-0", "gpu-2"}}} {
		got, err := simulate.New(testNode, selectors.DeviceClasses(""), slicesFor(t, inv, tc.bopts...)).Allocate(context.Background(), claimFor(1, 2, "", ""))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range got.Status.Allocation.Devices.Results {
			names = append(names, r.Device)
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("with %d options: two GPUs = %v, want %v", len(tc.bopts), names, tc.want)
		}
	}
	// GPU 0 unknown to the topology: GPU 2 has lost its partner and comes first, then the
	// island 1-3, then GPU 0, with no island.
	partial := permuted(topo, []int{1, 2, 3})
	devs, err := gpudra.NewBuilder(gpudra.WithTopology(partial)).Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	if got := gpuOrder(devs); !slices.Equal(got, []int{2, 1, 3, 0}) {
		t.Errorf("GPU 0 unknown to the topology: order %v, want [2 1 3 0]", got)
	}
	if _, ok := devs[3].Attributes[gpudra.AttrNVLinkIsland]; ok {
		t.Errorf("GPU 0, unknown to the topology, has an island")
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
