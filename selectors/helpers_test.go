package selectors_test

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

const testNode = "node-1"

var (
	balanced40 = gputest.WithMIGAll("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb")
	balanced80 = gputest.WithMIGAll("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")
	dynamicMIG = gpudra.WithDynamicMIG(nil)
)

// machine describes a fake machine and how the driver publishes it.
type machine struct {
	name  string
	mopts []gputest.Option
	bopts []gpudra.Option
}

// slices renders the ResourceSlices the driver publishes for a fake machine, as the reference
// driver's render command does.
func (m machine) slices(t testing.TB) []*resourceapi.ResourceSlice {
	t.Helper()
	fake, err := gputest.New(m.name, m.mopts...)
	if err != nil {
		t.Fatalf("gputest.New(%s): %v", m.name, err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), fake)
	if err != nil {
		t.Fatalf("Enumerate(%s): %v", m.name, err)
	}
	topo, err := nvmltopology.Discover(fake, nvmltopology.WithoutSysfs())
	if err != nil {
		t.Fatalf("nvmltopology.Discover(%s): %v", m.name, err)
	}
	b := gpudra.NewBuilder(append([]gpudra.Option{gpudra.WithPCIeRoot(topo.PCIeRoot), gpudra.WithTopology(topo)}, m.bopts...)...)
	res, err := b.Build(testNode, inv)
	if err != nil {
		t.Fatalf("Build(%s): %v", m.name, err)
	}
	out, err := gpudra.ResourceSlices(b.DriverName(), testNode, res)
	if err != nil {
		t.Fatalf("ResourceSlices(%s): %v", m.name, err)
	}
	return out
}

func (m machine) devices(t testing.TB) []*selectors.Device {
	t.Helper()
	return selectors.DevicesFromSlices(m.slices(t))
}

// testMachines are the fake machines selector tests run against: every GPU model family, with
// full GPUs, static MIG and dynamic MIG.
func testMachines() []machine {
	return []machine{
		{name: "dgx-a100-40gb"},
		{name: "dgx-a100-40gb", mopts: []gputest.Option{balanced40}},
		{name: "dgx-a100-80gb", mopts: []gputest.Option{balanced80}},
		{name: "dgx-a100-80gb", bopts: []gpudra.Option{dynamicMIG}},
		{name: "dgx-h100", bopts: []gpudra.Option{gpudra.WithConsumableMemory(gpudra.ConsumableMemory{})}},
		{name: "a30x4", bopts: []gpudra.Option{dynamicMIG}},
		{name: "l4x8"},
		{name: "a10gx4", mopts: []gputest.Option{gputest.WithDriverVersion("550.54.15"), gputest.WithCUDADriverVersion(12040)}},
		{name: "gb200-nvl4"},
	}
}
