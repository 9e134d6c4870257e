package seltest

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

// Node is the node the fake machines' ResourceSlices are published for.
const Node = "node-1"

var (
	// Balanced40 partitions every A100-40GB into 1g.5gb, 1g.5gb, 2g.10gb and 3g.20gb.
	Balanced40 = gputest.WithMIGAll("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb")
	// Balanced80 partitions every A100-80GB into 1g.10gb, 1g.10gb, 2g.20gb and 3g.40gb.
	Balanced80 = gputest.WithMIGAll("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")
	// DynamicMIG publishes MIG devices as partitionable devices (dynamic MIG).
	DynamicMIG = gpudra.WithDynamicMIG(nil)
)

// Machine describes a fake machine and how the driver publishes it.
type Machine struct {
	// Name is the gputest machine ("dgx-a100-40gb").
	Name string
	// MOpts change the fake machine (MIG partitions, driver version).
	MOpts []gputest.Option
	// BOpts change how the driver publishes it (dynamic MIG, consumable memory).
	BOpts []gpudra.Option
}

// Slices renders the ResourceSlices the driver publishes for a fake machine, as the reference
// driver's render command does.
func (m Machine) Slices(t testing.TB) []*resourceapi.ResourceSlice {
	t.Helper()
	fake, err := gputest.New(m.Name, m.MOpts...)
	if err != nil {
		t.Fatalf("gputest.New(%s): %v", m.Name, err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), fake)
	if err != nil {
		t.Fatalf("Enumerate(%s): %v", m.Name, err)
	}
	topo, err := nvmltopology.Discover(fake, nvmltopology.WithoutSysfs())
	if err != nil {
		t.Fatalf("nvmltopology.Discover(%s): %v", m.Name, err)
	}
	b := gpudra.NewBuilder(append([]gpudra.Option{gpudra.WithPCIeRoot(topo.PCIeRoot), gpudra.WithTopology(topo)}, m.BOpts...)...)
	res, err := b.Build(Node, inv)
	if err != nil {
		t.Fatalf("Build(%s): %v", m.Name, err)
	}
	out, err := gpudra.ResourceSlices(b.DriverName(), Node, res)
	if err != nil {
		t.Fatalf("ResourceSlices(%s): %v", m.Name, err)
	}
	return out
}

// Devices are the machine's published devices, prepared for evaluation.
func (m Machine) Devices(t testing.TB) []*selectors.Device {
	t.Helper()
	return selectors.DevicesFromSlices(m.Slices(t))
}

// Machines are the fake machines selector tests run against: every GPU model family, with
// full GPUs, static MIG and dynamic MIG.
func Machines() []Machine {
	return []Machine{
		{Name: "dgx-a100-40gb"},
		{Name: "dgx-a100-40gb", MOpts: []gputest.Option{Balanced40}},
		{Name: "dgx-a100-80gb", MOpts: []gputest.Option{Balanced80}},
		{Name: "dgx-a100-80gb", BOpts: []gpudra.Option{DynamicMIG}},
		{Name: "dgx-h100", BOpts: []gpudra.Option{gpudra.WithConsumableMemory(gpudra.ConsumableMemory{})}},
		{Name: "a30x4", BOpts: []gpudra.Option{DynamicMIG}},
		{Name: "l4x8"},
		{Name: "a10gx4", MOpts: []gputest.Option{gputest.WithDriverVersion("550.54.15"), gputest.WithCUDADriverVersion(12040)}},
		{Name: "gb200-nvl4"},
	}
}
