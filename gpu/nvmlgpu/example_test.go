package nvmlgpu_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
)

// Enumerate a fake DGX A100 whose first GPU runs the mig-parted "balanced" layout.
func Example() {
	machine, err := gputest.New("dgx-a100-40gb",
		gputest.WithMIG(0, "1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"))
	if err != nil {
		log.Fatal(err)
	}
	session, err := nvmlgpu.Open(machine)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	inv, err := session.Enumerate(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("driver", inv.DriverVersion, "cuda", inv.CUDADriverVersion)
	g := inv.GPUs[0]
	fmt.Println(g.Index, g.ProductName, g.Architecture, g.CudaComputeCapability, g.PCIBusID, g.MIGEnabled)
	for _, m := range g.MIGDevices {
		fmt.Printf("  %-8s profile Id %2d at %d+%d, %d SMs\n", m.Profile, m.GIProfileID, m.Placement.Start, m.Placement.Size, m.Multiprocessors)
	}
	// Output:
	// driver 580.126.9 cuda 13.0.0
	// 0 NVIDIA A100-SXM4-40GB Ampere 8.0.0 0000:07:00.0 true
	//   1g.5gb   profile Id 19 at 0+1, 14 SMs
	//   1g.5gb   profile Id 19 at 1+1, 14 SMs
	//   2g.10gb  profile Id 14 at 2+2, 28 SMs
	//   3g.20gb  profile Id  9 at 4+4, 42 SMs
}
