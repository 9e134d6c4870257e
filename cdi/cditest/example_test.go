package cditest_test

import (
	"fmt"
	"os"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
)

func ExampleBuild() {
	dir, err := os.MkdirTemp("", "driver-root")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	root, err := cditest.Build(dir, cditest.Layout{GPUs: 2})
	if err != nil {
		panic(err)
	}
	inst, err := cdi.Discover(root)
	if err != nil {
		panic(err)
	}
	node, err := inst.GPUDeviceNode(1)
	if err != nil {
		panic(err)
	}
	fmt.Println(node.Path, node.Major, node.Minor)
	// Output: /dev/nvidia1 195 1
}
