package gpudra

import (
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// ResourceSlices turns DriverResources for one node into complete ResourceSlice objects, named
// deterministically ("<node>-<driver>-<index>") so that they can be applied with kubectl or fed to
// the scheduler's allocator. The resourceslice controller, not this function, publishes slices in
// a running driver.
func ResourceSlices(driverName, nodeName string, res *resourceslice.DriverResources) ([]*resourceapi.ResourceSlice, error) {
	if res == nil {
		return nil, nil
	}
	pools := make([]string, 0, len(res.Pools))
	for name := range res.Pools {
		pools = append(pools, name)
	}
	sort.Strings(pools)
	var out []*resourceapi.ResourceSlice
	for _, poolName := range pools {
		pool := res.Pools[poolName]
		generation := max(pool.Generation, 1)
		for i, s := range pool.Slices {
			slice := &resourceapi.ResourceSlice{
				TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%s-%05d", nodeName, driverName, poolSuffix(poolName, nodeName), i)},
				Spec: resourceapi.ResourceSliceSpec{
					Driver: driverName,
					Pool: resourceapi.ResourcePool{
						Name:               poolName,
						Generation:         generation,
						ResourceSliceCount: int64(len(pool.Slices)),
					},
					Devices:        s.Devices,
					SharedCounters: s.SharedCounters,
				},
			}
			switch {
			case pool.NodeSelector != nil:
				slice.Spec.NodeSelector = pool.NodeSelector
			case pool.AllNodes:
				slice.Spec.AllNodes = &pool.AllNodes
			case s.PerDeviceNodeSelection != nil && *s.PerDeviceNodeSelection:
				slice.Spec.PerDeviceNodeSelection = s.PerDeviceNodeSelection
			default:
				slice.Spec.NodeName = &nodeName
			}
			out = append(out, slice)
		}
	}
	return out, nil
}

func poolSuffix(pool, node string) string {
	if pool == node {
		return "pool"
	}
	return pool
}
