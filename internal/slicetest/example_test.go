package slicetest_test

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/internal/slicetest"
)

func Example() {
	slices := []*resourceapi.ResourceSlice{{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{
		{Name: "gpu-0", AllowMultipleAllocations: ptr.To(true)},
		{Name: "gpu-1-mig-1g5gb-19-0"},
	}}}}
	fmt.Println(slicetest.FeaturesIn(slices), slicetest.DeviceKinds(slices))
	// Output: [DRAConsumableCapacity] map[gpu:1 mig:1]
}
