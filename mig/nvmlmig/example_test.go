package nvmlmig_test

import (
	"fmt"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

// Read the MIG model a GPU reports through NVML and log where the built-in catalog differs: here
// a fake A100 whose driver shrank 1g.5gb to 4.50 GiB.
func ExampleDeviceModel() {
	machine, err := gputest.New("dgx-a100-40gb", gputest.WithMIGProfileEdit("1g.5gb", func(p *mig.GIProfile) { p.MemoryMiB = 4608 }))
	if err != nil {
		panic(err)
	}
	live, diffs, err := nvmlmig.DeviceModel(machine.Device(0))
	if err != nil {
		panic(err)
	}
	p, _ := live.Profile("1g.5gb")
	fmt.Println(live.Name, p.Name, p.MemoryMiB, p.Sources.Memory)
	for _, d := range diffs {
		fmt.Println(d)
	}
	// Output:
	// A100-SXM4-40GB 1g.5gb 4608 device
	// profiles[1g.5gb].memoryMiB: table 4864, live 4608
}

// ExampleInstanceManager creates MIG instances on one GPU of a fake DGX A100 where mig.Plan puts
// them, beside an instance already there, and destroys them again: what a kubelet plugin with
// dynamic MIG does at prepare and unprepare (draplugin does it for you).
func ExampleInstanceManager() {
	machine, err := gputest.New("dgx-a100-40gb", gputest.WithMIG(0, "3g.20gb@4"))
	if err != nil {
		panic(err)
	}
	im, err := nvmlmig.NewInstanceManager(machine.Device(0), nil) // nil: the model of the GPU's product name
	if err != nil {
		panic(err)
	}
	current, err := im.Current()
	if err != nil {
		panic(err)
	}
	placed, err := mig.Plan(im.Model(), current, []string{"1g.5gb", "2g.10gb"})
	if err != nil {
		panic(err)
	}
	created, err := im.Apply(placed)
	if err != nil {
		panic(err)
	}
	for _, c := range created {
		fmt.Println("created", c.Instance, "reused:", c.Reused)
	}
	if err := im.Remove(placed); err != nil {
		panic(err)
	}
	left, _ := im.Current()
	fmt.Println("left:", mig.FormatLayout(left))
	// Output:
	// created 1g.5gb@2 reused: false
	// created 2g.10gb@0 reused: false
	// left: 3g.20gb@4
}
