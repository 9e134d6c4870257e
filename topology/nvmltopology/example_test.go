package nvmltopology_test

import (
	"fmt"
	"log"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

// Discover the interconnect of a fake DGX H100: every GPU reaches the others over NVSwitches,
// and PCIe roots, which a fake machine's bus IDs cannot find in the host's sysfs, are derived
// from NVML.
func Example() {
	machine, err := gputest.New("dgx-h100")
	if err != nil {
		log.Fatal(err)
	}
	topo, err := nvmltopology.Discover(machine, nvmltopology.WithoutSysfs())
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range topo.GPUs[:2] {
		fmt.Println(g.Index, g.PCIBusID, "NUMA", g.NUMANode, "NVLinks", g.NVLinks, "root", g.PCIeRoot, g.PCIeRootSource)
	}
	fmt.Println("GPU0-GPU7:", topo.Link(0, 7), "over", topo.Link(0, 7).PCIe)
	// Output:
	// 0 0000:1b:00.0 NUMA 0 NVLinks 18 root pci0000:1b derived
	// 1 0000:43:00.0 NUMA 0 NVLinks 18 root pci0000:43 derived
	// GPU0-GPU7: NV18 over SYS
}
