package gputest_test

import (
	"fmt"
	"log"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/gpu/gputest"
)

// A fake DGX A100 in mig-parted's all-balanced configuration behaves like the hardware: the
// 1g.5gb profile has NVML profile Id 19 (not its enum 0), and a GPU instance overlapping an
// existing one is refused.
func Example() {
	m, err := gputest.New("dgx-a100-40gb", gputest.WithMIGConfig("all-balanced"))
	if err != nil {
		log.Fatal(err)
	}
	for _, gi := range m.GPUInstances(0) {
		fmt.Printf("GI %2d %-8s Id %2d at %d+%d\n", gi.ID, gi.Profile, gi.ProfileID, gi.Placement.Start, gi.Placement.Size)
	}

	d, _ := m.DeviceGetHandleByIndex(0)
	info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	_, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 4, Size: 1})
	fmt.Println("1g.5gb at slice 4:", ret)
	// Output:
	// GI  1 3g.20gb  Id  9 at 4+4
	// GI  6 2g.10gb  Id 14 at 0+2
	// GI 11 1g.5gb   Id 19 at 3+1
	// GI 12 1g.5gb   Id 19 at 2+1
	// 1g.5gb at slice 4: ERROR_INSUFFICIENT_RESOURCES
}
