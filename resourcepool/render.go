package resourcepool

import (
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ResourceSlices turns the pool of one node into complete ResourceSlice objects, named
// deterministically ("<node>-<driver>-pool-<index>") so that they can be applied with kubectl or
// fed to the scheduler's allocator. The kubelet-plugin helper, not this function, publishes
// slices in a running driver.
func ResourceSlices(driverName, nodeName string, pool *Pool) ([]*resourceapi.ResourceSlice, error) {
	if pool == nil {
		return nil, errors.New("pool is nil")
	}
	if err := ValidateDriverName(driverName); err != nil {
		return nil, err
	}
	if err := ValidateNodeName(nodeName); err != nil {
		return nil, err
	}
	if err := ValidatePoolName(pool.Name); err != nil {
		return nil, err
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(pool.Slices))
	for i, s := range pool.Slices {
		name := fmt.Sprintf("%s-%s-%s-%05d", nodeName, driverName, poolSuffix(pool.Name, nodeName), i)
		if problems := validation.IsDNS1123Subdomain(name); len(problems) > 0 {
			return nil, fmt.Errorf("ResourceSlice name %q (<node>-<driver>-<pool>-<index>): %s", name, strings.Join(problems, "; "))
		}
		out = append(out, &resourceapi.ResourceSlice{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:         driverName,
				Pool:           resourceapi.ResourcePool{Name: pool.Name, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
				NodeName:       &nodeName,
				Devices:        s.Devices,
				SharedCounters: s.SharedCounters,
			},
		})
	}
	return out, nil
}

func poolSuffix(pool, node string) string {
	if pool == node {
		return "pool"
	}
	return pool
}
