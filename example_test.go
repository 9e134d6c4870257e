package gpudra_test

import (
	"context"
	"fmt"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

// ExampleBuilder publishes a fake DGX A100 in mig-parted's all-balanced layout: every GPU
// publishes its four MIG devices and not itself.
func ExampleBuilder() {
	machine, err := gputest.New("dgx-a100-40gb", gputest.WithMIGConfig("all-balanced"))
	if err != nil {
		panic(err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), machine)
	if err != nil {
		panic(err)
	}
	res, err := gpudra.NewBuilder().Build("node-1", inv)
	if err != nil {
		panic(err)
	}
	devices := res.Slices[0].Devices
	fmt.Println(len(devices), "devices; first:", devices[0].Name, *devices[0].Attributes["profile"].StringValue)
	// Output: 32 devices; first: gpu-0-mig-2g10gb-14-0 2g.10gb
}

// ExampleWithTopology publishes an A30 server whose NVLink bridges join GPUs 0-1 and 2-3: each
// GPU names its NVLink island, so a claim can ask for two GPUs of one island with
// matchAttribute gpu.nvidia.com/nvlinkIsland.
func ExampleWithTopology() {
	machine, err := gputest.New("a30x4")
	if err != nil {
		panic(err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), machine)
	if err != nil {
		panic(err)
	}
	topo, err := nvmltopology.Discover(machine, nvmltopology.WithoutSysfs())
	if err != nil {
		panic(err)
	}
	devices, err := gpudra.NewBuilder(gpudra.WithTopology(topo)).Devices(inv)
	if err != nil {
		panic(err)
	}
	for _, d := range devices {
		fmt.Println(d.Name, *d.Attributes[gpudra.AttrNVLinkIsland].StringValue, *d.Attributes[gpudra.StdAttrPCIeRoot].StringValue)
	}
	// Output:
	// gpu-0 0000:17:00.0 pci0000:17
	// gpu-1 0000:17:00.0 pci0000:65
	// gpu-2 0000:ca:00.0 pci0000:ca
	// gpu-3 0000:ca:00.0 pci0000:e3
}

// ExampleResourceSlices publishes a fake DGX A100 with dynamic MIG: each GPU offers itself and
// every placement of every MIG profile its geometry allows (25 on an A100-40GB), and a counter
// set per GPU lets the scheduler pick only sets of devices that form a valid MIG layout. Counter
// sets come first, in a slice of their own; devices that consume counters go 64 to a slice.
func ExampleResourceSlices() {
	machine, err := gputest.New("dgx-a100-40gb")
	if err != nil {
		panic(err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), machine)
	if err != nil {
		panic(err)
	}
	const node = "node-1" // the Kubernetes node name, which also names the pool
	if err := gpudra.ValidateNodeName(node); err != nil {
		panic(err)
	}
	b := gpudra.NewBuilder(gpudra.WithDynamicMIG(nil))
	pool, err := b.Build(node, inv)
	if err != nil {
		panic(err)
	}
	slices, err := gpudra.ResourceSlices(b.DriverName(), node, pool)
	if err != nil {
		panic(err)
	}
	for _, s := range slices {
		fmt.Println(s.Name, len(s.Spec.SharedCounters), "counter sets,", len(s.Spec.Devices), "devices")
	}
	fmt.Println(gpudra.GPUDeviceName(inv.GPUs[0].Minor), gpudra.MIGDeviceName(gpudra.MIGName{ParentMinor: 0, Profile: "1g.5gb", GIProfileID: 19, PlacementStart: 6}))
	fmt.Println("GPU_Node is a valid node name:", gpudra.ValidateNodeName("GPU_Node") == nil)
	// Output:
	// node-1-gpu.nvidia.com-pool-00000 8 counter sets, 0 devices
	// node-1-gpu.nvidia.com-pool-00001 0 counter sets, 64 devices
	// node-1-gpu.nvidia.com-pool-00002 0 counter sets, 64 devices
	// node-1-gpu.nvidia.com-pool-00003 0 counter sets, 64 devices
	// node-1-gpu.nvidia.com-pool-00004 0 counter sets, 16 devices
	// gpu-0 gpu-0-mig-1g5gb-19-6
	// GPU_Node is a valid node name: false
}
