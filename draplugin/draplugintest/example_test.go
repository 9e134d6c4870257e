package draplugintest_test

import (
	"context"
	"fmt"

	"github.com/gpudra/gpudra/draplugin/draplugintest"
)

// A driver test on a fake DGX A100 with dynamic MIG: a claim for a 1g.5gb partition is
// allocated by the scheduler's allocator, prepared as kubelet would, and unprepared.
func Example() {
	ctx := context.Background()
	node, err := draplugintest.NewNode("dgx-a100-40gb", draplugintest.WithDynamicMIG())
	if err != nil {
		panic(err)
	}
	defer node.Close()
	plugin, err := node.NewPlugin(ctx)
	if err != nil {
		panic(err)
	}
	claim, err := node.Allocate(ctx, draplugintest.Claim("inference", "mig.nvidia.com",
		"device.attributes['gpu.nvidia.com'].profile == '1g.5gb'", ""))
	if err != nil {
		panic(err)
	}
	devices, err := draplugintest.Prepare(ctx, plugin, claim)
	if err != nil {
		panic(err)
	}
	specs, _ := node.Specs()
	fmt.Println(devices[0].DeviceName, "MIG instances:", node.MIGInstances(), "specs:", len(specs))

	if err := draplugintest.Unprepare(ctx, plugin, claim); err != nil {
		panic(err)
	}
	specs, _ = node.Specs()
	fmt.Println("after unprepare: MIG instances:", len(node.MIGInstances()), "specs:", len(specs), "host clean:", node.HostClean() == nil)
	// Output:
	// gpu-0-mig-1g5gb-19-6 MIG instances: [0:1g.5gb@6] specs: 1
	// after unprepare: MIG instances: 0 specs: 0 host clean: true
}
