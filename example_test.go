package gpudra_test

import (
	"context"
	"fmt"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology"
)

// ExampleBuilder publishes a fake DGX A100 in mig-parted's all-balanced layout: every GPU
// publishes its four MIG devices and not itself.
func ExampleBuilder() {
	machine, err := gputest.New("dgx-a100-40gb", gputest.WithMIGConfig("all-balanced"))
	if err != nil {
		panic(err)
	}
	inv, err := gpu.Enumerate(context.Background(), machine)
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
	inv, err := gpu.Enumerate(context.Background(), machine)
	if err != nil {
		panic(err)
	}
	topo, err := topology.Discover(machine, topology.WithoutSysfs())
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

// ExamplePublishedDevice_CDIDevice maps the devices a node publishes to the entries of a claim's
// CDI spec: a MIG device names its parent's /dev/nvidia<N> and its own instance IDs.
func ExamplePublishedDevice_CDIDevice() {
	machine, err := gputest.New("dgx-a100-40gb", gputest.WithMIGConfig("all-balanced"))
	if err != nil {
		panic(err)
	}
	inv, err := gpu.Enumerate(context.Background(), machine)
	if err != nil {
		panic(err)
	}
	published, err := gpudra.NewBuilder().Published(inv)
	if err != nil {
		panic(err)
	}
	cd := published[len(published)-1].CDIDevice()
	fmt.Println(cd.Name, "on /dev/nvidia"+fmt.Sprint(cd.GPUMinor), "GI", cd.MIG.GI, "CI", cd.MIG.CI)
	// Output: gpu-7-mig-3g20gb-9-4 on /dev/nvidia7 GI 1 CI 0
}
