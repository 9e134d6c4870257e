package gpudra

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/resourcepool"
)

// ResourceSlices turns the pool of one node into complete ResourceSlice objects, named
// deterministically ("<node>-<driver>-pool-<index>") so that they can be applied with kubectl or
// fed to the scheduler's allocator. The kubelet-plugin helper, not this function, publishes
// slices in a running driver. It is resourcepool.ResourceSlices.
func ResourceSlices(driverName, nodeName string, pool *Pool) ([]*resourceapi.ResourceSlice, error) {
	return resourcepool.ResourceSlices(driverName, nodeName, pool)
}
