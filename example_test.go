package gpudra_test

import (
	"context"
	"fmt"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
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
