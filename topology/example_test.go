package topology_test

import (
	"fmt"
	"log"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

// Discover the interconnect of a fake DGX A100, look up a PCIe root the way a ResourceSlice
// builder does, and pick the two best-connected GPUs among three free ones.
func Example() {
	machine, err := gputest.New("dgx-a100-40gb")
	if err != nil {
		log.Fatal(err)
	}
	// A fake machine's bus IDs mean nothing in the host's sysfs: derive the roots from NVML.
	topo, err := nvmltopology.Discover(machine, nvmltopology.WithoutSysfs())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("GPU0-GPU1:", topo.Link(0, 1), "over", topo.Link(0, 1).PCIe)
	fmt.Println("GPU0-GPU2:", topo.Link(0, 2), "over", topo.Link(0, 2).PCIe)
	g := topo.GPUs[1]
	fmt.Println(g.PCIBusID, "NUMA", g.NUMANode, "root", topo.PCIeRoot("00000000:0F:00.0"), g.PCIeRootSource)

	best, err := topology.BestSet(topo, 2, []int{1, 2, 3})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("best 2 of [1 2 3]:", best)
	// Output:
	// GPU0-GPU1: NV12 over PXB
	// GPU0-GPU2: NV12 over SYS
	// 0000:0f:00.0 NUMA 3 root pci0000:07 derived
	// best 2 of [1 2 3]: [2 3]
}

// Render a PCIe server whose A30s are joined in pairs by NVLink bridges, in the style of
// `nvidia-smi topo -m`, with its NVLink islands.
func ExampleRender() {
	machine, err := gputest.New("a30x4")
	if err != nil {
		log.Fatal(err)
	}
	topo, err := nvmltopology.Discover(machine, nvmltopology.WithoutSysfs())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(topology.Render(topo))
	// Output:
	//       GPU0  GPU1  GPU2  GPU3  NUMA Affinity
	// GPU0  X     NV4   SYS   SYS   0
	// GPU1  NV4   X     SYS   SYS   0
	// GPU2  SYS   SYS   X     NV4   1
	// GPU3  SYS   SYS   NV4   X     1
	//
	// PCIe paths under the NVLinks:
	//       GPU0  GPU1  GPU2  GPU3  NUMA Affinity
	// GPU0  X     NODE  SYS   SYS   0
	// GPU1  NODE  X     SYS   SYS   0
	// GPU2  SYS   SYS   X     NODE  1
	// GPU3  SYS   SYS   NODE  X     1
	//
	//       Bus ID        PCIe Root             NVLinks
	// GPU0  0000:17:00.0  pci0000:17 (derived)  4
	// GPU1  0000:65:00.0  pci0000:65 (derived)  4
	// GPU2  0000:ca:00.0  pci0000:ca (derived)  4
	// GPU3  0000:e3:00.0  pci0000:e3 (derived)  4
	//
	// NVLink islands:
	//   0000:17:00.0: GPU0 GPU1
	//   0000:ca:00.0: GPU2 GPU3
	//
	// Legend:
	//   X     the GPU itself
	//   NV#   # NVLinks between the two GPUs, direct or through NVSwitches
	//   PIX   PCIe, through at most one PCIe bridge
	//   PXB   PCIe, through several PCIe bridges but no host bridge
	//   PHB   PCIe, through a PCIe host bridge (the CPU's root complex)
	//   NODE  PCIe, between host bridges of one NUMA node
	//   SYS   PCIe, across the interconnect between NUMA nodes (UPI, xGMI, ...)
	//   N/A   not reported by NVML
}

// Group the GPUs of a DGX H100 and of an A30 server whose NVLink bridges join GPUs 0-2 and 1-3
// into NVLink islands, and get the order in which to publish them to a first-fit allocator.
func ExampleTopology_Islands() {
	dgx, err := gputest.New("dgx-h100")
	if err != nil {
		log.Fatal(err)
	}
	a30, err := gputest.New("a30x4", gputest.WithNVLinkBridges([2]int{0, 2}, [2]int{1, 3}))
	if err != nil {
		log.Fatal(err)
	}
	for _, machine := range []*gputest.Machine{dgx, a30} {
		topo, err := nvmltopology.Discover(machine, nvmltopology.WithoutSysfs())
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(machine.Name(), topo.Islands(), "order", topo.Order())
	}
	// Output:
	// dgx-h100 [{0000:1b:00.0 [0 1 2 3 4 5 6 7]}] order [0 1 2 3 4 5 6 7]
	// a30x4 [{0000:17:00.0 [0 2]} {0000:65:00.0 [1 3]}] order [0 2 1 3]
}
