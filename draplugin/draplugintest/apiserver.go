package draplugintest

import (
	"fmt"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpudra/gpudra"
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
	client := fake.NewSimpleClientset(objs...)
	verbs := metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	client.Resources = []*metav1.APIResourceList{{
		GroupVersion: resourceapi.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{
			{Name: "resourceslices", Kind: "ResourceSlice", Verbs: verbs},
			{Name: "resourceclaims", Namespaced: true, Kind: "ResourceClaim", Verbs: verbs},
		},
	}}
	s := &sliceServer{tracker: client.Tracker(), disabled: slices.Clone(disabled)}
	client.PrependReactor("create", "resourceslices", s.create)
	client.PrependReactor("update", "resourceslices", s.update)
	return client
}

// sliceServer writes ResourceSlices as an API server with some feature gates off.
type sliceServer struct {
	tracker  k8stesting.ObjectTracker
	disabled []gpudra.Feature
	mu       sync.Mutex
	seq      int
}

func (s *sliceServer) create(a k8stesting.Action) (bool, runtime.Object, error) {
	ca, ok := a.(k8stesting.CreateActionImpl)
	if !ok || ca.GetSubresource() != "" {
		return false, nil, nil
	}
	in, ok := ca.GetObject().(*resourceapi.ResourceSlice)
	if !ok {
		return true, nil, fmt.Errorf("create resourceslices: got a %T", ca.GetObject())
	}
	out := DropDisabledFields(in, s.disabled...)
	if out.Name == "" && out.GenerateName != "" {
		s.mu.Lock()
		s.seq++
		out.Name = fmt.Sprintf("%s%05d", out.GenerateName, s.seq)
		s.mu.Unlock()
	}
	if slices.Contains(ca.CreateOptions.DryRun, metav1.DryRunAll) {
		return true, out, nil
	}
	if err := s.tracker.Create(ca.GetResource(), out, "", ca.CreateOptions); err != nil {
		return true, nil, err
	}
	stored, err := s.tracker.Get(ca.GetResource(), "", out.Name)
	return true, stored, err
}

func (s *sliceServer) update(a k8stesting.Action) (bool, runtime.Object, error) {
	ua, ok := a.(k8stesting.UpdateActionImpl)
	if !ok || ua.GetSubresource() != "" {
		return false, nil, nil
	}
	in, ok := ua.GetObject().(*resourceapi.ResourceSlice)
	if !ok {
		return true, nil, fmt.Errorf("update resourceslices: got a %T", ua.GetObject())
	}
	out := DropDisabledFields(in, s.disabled...)
	if slices.Contains(ua.UpdateOptions.DryRun, metav1.DryRunAll) {
		return true, out, nil
	}
	if err := s.tracker.Update(ua.GetResource(), out, "", ua.UpdateOptions); err != nil {
		return true, nil, err
	}
	stored, err := s.tracker.Get(ua.GetResource(), "", out.Name)
	return true, stored, err
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
