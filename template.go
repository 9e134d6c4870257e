package gpudra

import (
	"errors"
	"fmt"
	"maps"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/gpu"
)

// TemplateNodeName is the node and pool name of slice templates: a placeholder for the node an
// autoscaler simulates. cluster-autoscaler sets spec.nodeName to its template node and renames
// the pool when it copies a node's slices; Karpenter's ResourceSliceTemplates ignore both.
const TemplateNodeName = "template-node"

// TemplateOption configures SliceTemplates.
type TemplateOption func(*templateOptions)

type templateOptions struct {
	nodeName       string
	driverVersions bool
}

// WithTemplateNodeName writes the templates for a node of this name (default
// TemplateNodeName), e.g. the name of the template node an autoscaler builds.
func WithTemplateNodeName(name string) TemplateOption {
	return func(o *templateOptions) { o.nodeName = name }
}

// WithTemplateDriverVersions keeps the inventory's driverVersion and cudaDriverVersion
// attributes: use it when every node the template stands for runs the NVIDIA driver the
// inventory was taken with (one node image), so that claims selecting a driver version can
// trigger a scale-up.
func WithTemplateDriverVersions() TemplateOption {
	return func(o *templateOptions) { o.driverVersions = true }
}

// SliceTemplates returns the ResourceSlices a node with this inventory would publish when it
// starts, with what differs between nodes of the same GPU type left out, so that an autoscaler
// can simulate a node it has not created yet (cluster-autoscaler's TemplateNodeInfo, Karpenter's
// ResourceSliceTemplates; kubernetes/autoscaler#7724, karpenter-provider-aws#9519):
//
//   - spec.nodeName, the pool name and the slice names are those of TemplateNodeName;
//   - the attributes that identify one piece of hardware (uuid, parentUUID,
//     resource.kubernetes.io/pciBusID) are left out, and so are driverVersion and
//     cudaDriverVersion, which belong to the node's software (see WithTemplateDriverVersions);
//   - device taints (health) are left out: a new node's GPUs are healthy.
//
// Everything a claim selects or constrains on across nodes of one type stays: device names,
// type, product, architecture, compute capability, MIG profiles, capacities, shared counters,
// pcieRoot and numaNode. Use an inventory enumerated on the GPU type (nvmlgpu.Enumerate on a
// gputest machine or on a real node) and the Builder the driver publishes with.
func SliceTemplates(b *Builder, inv *gpu.Inventory, opts ...TemplateOption) ([]*resourceapi.ResourceSlice, error) {
	if b == nil {
		return nil, errors.New("slice templates: builder is nil")
	}
	o := templateOptions{nodeName: TemplateNodeName}
	for _, opt := range opts {
		opt(&o)
	}
	pool, err := b.Build(o.nodeName, inv)
	if err != nil {
		return nil, fmt.Errorf("slice templates: %w", err)
	}
	slices, err := ResourceSlices(b.DriverName(), o.nodeName, pool)
	if err != nil {
		return nil, fmt.Errorf("slice templates: %w", err)
	}
	for _, s := range slices {
		for i := range s.Spec.Devices {
			templateDevice(&s.Spec.Devices[i], o)
		}
	}
	return slices, nil
}

// templateDevice leaves out what differs between nodes of one GPU type.
func templateDevice(d *resourceapi.Device, o templateOptions) {
	attrs := maps.Clone(d.Attributes)
	leaveOut := []resourceapi.QualifiedName{AttrUUID, AttrParentUUID, StdAttrPCIBusID}
	if !o.driverVersions {
		leaveOut = append(leaveOut, AttrDriverVersion, AttrCudaDriverVersion)
	}
	for _, name := range leaveOut {
		delete(attrs, name)
	}
	d.Attributes = attrs
	d.Taints = nil
}
