package resourcepool_test

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/resourcepool"
)

// Example publishes 200 accelerators of one node: the API allows 128 devices in one
// ResourceSlice, so the pool has two.
func Example() {
	devices := make([]resourceapi.Device, 200)
	for i := range devices {
		devices[i].Name = fmt.Sprintf("accel-%d", i)
	}
	if err := resourcepool.ValidateDevices(devices); err != nil {
		panic(err)
	}
	pool, err := resourcepool.New("node-1", devices)
	if err != nil {
		panic(err)
	}
	objs, err := resourcepool.ResourceSlices("accel.example.com", "node-1", pool)
	if err != nil {
		panic(err)
	}
	for _, s := range objs {
		fmt.Println(s.Name, len(s.Spec.Devices), "devices")
	}
	// Output:
	// node-1-accel.example.com-pool-00000 128 devices
	// node-1-accel.example.com-pool-00001 72 devices
}
