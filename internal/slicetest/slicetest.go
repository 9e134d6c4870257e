package slicetest

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
)

// FeaturesIn says which optional features the slices use, read from the fields each feature
// guards in resource.k8s.io/v1 (ResourceSliceSpec and Device), in gpudra.OptionalFeatures order.
func FeaturesIn(slices []*resourceapi.ResourceSlice) []gpudra.Feature {
	used := map[gpudra.Feature]bool{}
	for _, s := range slices {
		used[gpudra.FeaturePartitionableDevices] = used[gpudra.FeaturePartitionableDevices] || len(s.Spec.SharedCounters) > 0
		for _, d := range s.Spec.Devices {
			used[gpudra.FeaturePartitionableDevices] = used[gpudra.FeaturePartitionableDevices] || len(d.ConsumesCounters) > 0
			used[gpudra.FeatureConsumableCapacity] = used[gpudra.FeatureConsumableCapacity] || d.AllowMultipleAllocations != nil
			for _, c := range d.Capacity {
				used[gpudra.FeatureConsumableCapacity] = used[gpudra.FeatureConsumableCapacity] || c.RequestPolicy != nil
			}
			used[gpudra.FeatureDeviceTaints] = used[gpudra.FeatureDeviceTaints] || len(d.Taints) > 0
			used[gpudra.FeatureDeviceBindingConditions] = used[gpudra.FeatureDeviceBindingConditions] ||
				len(d.BindingConditions)+len(d.BindingFailureConditions) > 0 || d.BindsToNode != nil
		}
	}
	var out []gpudra.Feature
	for _, f := range gpudra.OptionalFeatures() {
		if used[f] {
			out = append(out, f)
		}
	}
	return out
}

// DeviceKinds counts the published devices by kind: "gpu" (full GPUs), "mig" (static MIG
// devices) and "partition" (dynamic MIG partitions: MIG devices that consume counters).
func DeviceKinds(slices []*resourceapi.ResourceSlice) map[string]int {
	out := map[string]int{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			switch {
			case !strings.Contains(d.Name, "-mig-"):
				out["gpu"]++
			case len(d.ConsumesCounters) > 0:
				out["partition"]++
			default:
				out["mig"]++
			}
		}
	}
	return out
}
