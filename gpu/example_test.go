package gpu_test

import (
	"fmt"

	"github.com/gpudra/gpudra/gpu"
)

// NVML spells PCI addresses and driver versions several ways; the inventory holds one.
func Example() {
	for _, s := range []string{"00000000:07:00.0", "0000:CA:00.0"} {
		id, err := gpu.CanonicalPCIBusID(s)
		fmt.Println(id, err)
	}
	v, _ := gpu.NormalizeDriverVersion("580.126.09")
	cuda, _ := gpu.CUDADriverVersion(12040)
	fmt.Println(v, cuda)
	// Output:
	// 0000:07:00.0 <nil>
	// 0000:ca:00.0 <nil>
	// 580.126.9 12.4.0
}
