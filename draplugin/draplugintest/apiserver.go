package draplugintest

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
)

// NewAPIClient returns a fake API client holding objs that answers as a Kubernetes API server
// whose feature gates of the disabled features are off:
//
//   - discovery serves resource.k8s.io/v1 with resourceslices and resourceclaims;
//   - ResourceSlice creates and updates lose the fields of the disabled features
//     (DropDisabledFields), as the API server's ResourceSlice strategy drops them, without an
//     error; a dry run (DryRun: All) returns the object as it would be stored and stores
//     nothing;
//   - generateName is honoured.
//
// It is client-go's simple clientset otherwise (no server-side apply, no validation). The real
// server keeps, on update, the fields of a disabled feature that the stored slice already uses;
// this fake drops them on update too.
func NewAPIClient(disabled []gpudra.Feature, objs ...runtime.Object) *fake.Clientset {
	disabled = slices.Clone(disabled)
	return kubelettest.NewAPIClient(func(s *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
		return DropDisabledFields(s, disabled...)
	}, objs...)
}

// DropDisabledFields returns a copy of slice without the fields of the disabled features, as
// the API server's ResourceSlice strategy stores a new slice with those feature gates off
// (k8s.io/kubernetes pkg/registry/resource/resourceslice, v1.37):
//
//   - partitionable devices: spec.sharedCounters, spec.perDeviceNodeSelection, and each
//     device's consumesCounters, nodeName, nodeSelector and allNodes;
//   - consumable capacity: each device's allowMultipleAllocations and every capacity's
//     requestPolicy;
//   - device taints: each device's taints;
//   - binding conditions: each device's bindingConditions, bindingFailureConditions and
//     bindsToNode.
func DropDisabledFields(slice *resourceapi.ResourceSlice, disabled ...gpudra.Feature) *resourceapi.ResourceSlice {
	out := slice.DeepCopy()
	for _, f := range disabled {
		if f == gpudra.FeaturePartitionableDevices {
			out.Spec.SharedCounters, out.Spec.PerDeviceNodeSelection = nil, nil
		}
		for i := range out.Spec.Devices {
			dropDeviceFields(&out.Spec.Devices[i], f)
		}
	}
	return out
}

func dropDeviceFields(d *resourceapi.Device, f gpudra.Feature) {
	switch f {
	case gpudra.FeaturePartitionableDevices:
		d.ConsumesCounters, d.NodeName, d.NodeSelector, d.AllNodes = nil, nil, nil, nil
	case gpudra.FeatureConsumableCapacity:
		d.AllowMultipleAllocations = nil
		for name, c := range d.Capacity {
			c.RequestPolicy = nil
			d.Capacity[name] = c
		}
	case gpudra.FeatureDeviceTaints:
		d.Taints = nil
	case gpudra.FeatureDeviceBindingConditions:
		d.BindingConditions, d.BindingFailureConditions, d.BindsToNode = nil, nil, nil
	}
}
