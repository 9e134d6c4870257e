package gpudra

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/resourcepool"
)

// Attribute and capacity names published in the driver's domain. They are part of the
// compatibility contract: DeviceClasses and claims written for NVIDIA's DRA driver use them.
//
// The prefix of a constant's Go name says where its name is defined and how a claim spells it:
//
//   - Attr...: an attribute in the driver's own domain (here and in placement.go, e.g.
//     AttrNVLinkIsland), written device.attributes['gpu.nvidia.com'].nvlinkIsland; the value
//     is the name without a domain, qualified by the driver name.
//   - StdAttr...: a standard attribute Kubernetes defines (k8s.io/dynamic-resource-allocation's
//     deviceattribute, e.g. StdAttrPCIeRoot), written
//     device.attributes['resource.kubernetes.io'].pcieRoot; the value carries that domain, and
//     other drivers (NICs) publish the same name, so matchAttribute can align devices across
//     drivers.
//   - Cap...: a capacity in the driver's domain (device.capacity['gpu.nvidia.com'].memory).
const (
	AttrType                  resourceapi.QualifiedName = "type"
	AttrUUID                  resourceapi.QualifiedName = "uuid"
	AttrProductName           resourceapi.QualifiedName = "productName"
	AttrBrand                 resourceapi.QualifiedName = "brand"
	AttrArchitecture          resourceapi.QualifiedName = "architecture"
	AttrCudaComputeCapability resourceapi.QualifiedName = "cudaComputeCapability"
	AttrDriverVersion         resourceapi.QualifiedName = "driverVersion"
	AttrCudaDriverVersion     resourceapi.QualifiedName = "cudaDriverVersion"
	AttrIndex                 resourceapi.QualifiedName = "index"
	AttrMinor                 resourceapi.QualifiedName = "minor"
	AttrProfile               resourceapi.QualifiedName = "profile"
	AttrParentUUID            resourceapi.QualifiedName = "parentUUID"
	AttrParentIndex           resourceapi.QualifiedName = "parentIndex"

	CapMemory          resourceapi.QualifiedName = "memory"
	CapMultiprocessors resourceapi.QualifiedName = "multiprocessors"
	CapCopyEngines     resourceapi.QualifiedName = "copyEngines"
	CapDecoders        resourceapi.QualifiedName = "decoders"
	CapEncoders        resourceapi.QualifiedName = "encoders"
	CapJpegEngines     resourceapi.QualifiedName = "jpegEngines"
	CapOfaEngines      resourceapi.QualifiedName = "ofaEngines"
)

// Standard attributes defined by Kubernetes (resource.kubernetes.io/...): the StdAttr prefix
// marks a name qualified by Kubernetes' domain rather than the driver's (see the Attr constants).
const (
	StdAttrPCIBusID = resourceapi.QualifiedName(deviceattribute.StandardDeviceAttributePCIBusID)
	StdAttrPCIeRoot = resourceapi.QualifiedName(deviceattribute.StandardDeviceAttributePCIeRoot)
	StdAttrNUMANode = resourceapi.QualifiedName(deviceattribute.StandardDeviceAttributeNUMANode)
)

// PCIeRootFunc resolves the PCIe root ("pci0000:00") of a PCI bus ID. It returns "" when the root
// is unknown; the attribute is then left out.
type PCIeRootFunc func(pciBusID string) string

// Builder turns an inventory into the resources a driver publishes. It is safe for concurrent
// use once constructed.
type Builder struct {
	driverName string
	maxDevices int
	pcieRoot   PCIeRootFunc
	taints     []func(device string) []resourceapi.DeviceTaint
	migLookup  func(productName string) (*mig.Model, error)
	migOwned   func(g *gpu.GPU, d *gpu.MIGDevice) bool
	// migProfiles, when not nil, are the only GPU-instance profiles dynamic MIG publishes.
	migProfiles map[string]bool
	consumable  *ConsumableMemory
	topo        *placements // WithTopology, nil without
	// partitionsFirst and oneMediaExtensionPlacement: WithPartitionsFirst,
	// WithOneMediaExtensionPlacement.
	partitionsFirst, oneMediaExtensionPlacement bool
	// migByProfile groups existing MIG devices by profile (WithMIGDevicesByProfile).
	migByProfile bool
	// listAttributes publishes list-valued attributes (WithListAttributes).
	listAttributes bool
	// passthrough publishes vfio devices (WithPassthrough), nil without.
	passthrough PassthroughFunc
	// without are the features WithoutFeatures turns off, after every other option.
	without []Feature
}

// Option configures a Builder.
type Option func(*Builder)

// WithDriverName overrides the driver name (default gpu.nvidia.com). The attribute domain is the
// driver name.
func WithDriverName(name string) Option { return func(b *Builder) { b.driverName = name } }

// WithMaxDevicesPerSlice lowers the number of devices per ResourceSlice below the API limits
// (128, or 64 when devices use taints or counters). Values above the limit are capped; 0 keeps
// the limit; a negative n makes Build fail.
func WithMaxDevicesPerSlice(n int) Option { return func(b *Builder) { b.maxDevices = n } }

// WithPCIeRoot sets how PCIe roots are resolved for the resource.kubernetes.io/pcieRoot attribute.
// Without it the attribute comes from WithTopology, and without either it is left out.
func WithPCIeRoot(f PCIeRootFunc) Option { return func(b *Builder) { b.pcieRoot = f } }

// WithDeviceTaints adds taints (for example from health monitoring) to devices by name. Each
// use adds a source; a device gets the taints of every source, in the order they were given.
func WithDeviceTaints(f func(device string) []resourceapi.DeviceTaint) Option {
	return func(b *Builder) {
		if f != nil {
			b.taints = append(b.taints, f)
		}
	}
}

// NewBuilder returns a Builder with production defaults.
func NewBuilder(opts ...Option) *Builder {
	b := &Builder{driverName: DefaultDriverName}
	for _, o := range opts {
		o(b)
	}
	b.degrade()
	return b
}

// DriverName returns the driver name the builder publishes for.
func (b *Builder) DriverName() string { return b.driverName }

// DynamicMIG returns the MIG geometry lookup of WithDynamicMIG, or nil when MIG-capable GPUs
// are not published as dynamic partitions.
func (b *Builder) DynamicMIG() func(productName string) (*mig.Model, error) { return b.migLookup }

// PublishedDevice says what one published device is on the node, so that a kubelet plugin can
// prepare it from its name without parsing the name or reading its attributes back.
type PublishedDevice struct {
	// Name is the DRA device name.
	Name string
	// GPU is the physical GPU: the device itself, or the parent of a MIG device or partition.
	GPU *gpu.GPU
	// MIG is set for an existing MIG device (static MIG).
	MIG *gpu.MIGDevice
	// Partition is set for a dynamic MIG partition, whose instance is created when a claim that
	// got it is prepared.
	Partition *Partition
	// Passthrough is set for a GPU published for passthrough to a virtual machine
	// (WithPassthrough): preparing it binds the GPU to vfio-pci.
	Passthrough *Passthrough
}

// Partition is a dynamic MIG partition: a GPU-instance profile at one placement.
type Partition struct {
	// Model is the GPU's MIG geometry, as WithDynamicMIG's lookup returned it.
	Model *mig.Model
	// Profile is the GPU-instance profile (of Model).
	Profile *mig.GIProfile
	// Placement is where the instance will sit, in memory slices.
	Placement mig.Placement
}

// Published returns what every device the builder would publish for the inventory is, in
// publishing order (the order of Devices). The GPU and MIG pointers point into inv.
func (b *Builder) Published(inv *gpu.Inventory) ([]PublishedDevice, error) {
	pub, err := b.build(inv)
	if err != nil {
		return nil, err
	}
	return pub.refs, nil
}

// Devices returns every device the builder would publish for the inventory, in publishing
// order: GPUs by index, or in the topology's order with WithTopology (full GPUs and static MIG
// devices, each GPU's together), then the dynamic MIG partitions of all GPUs, grouped by profile
// and best placement first (see WithDynamicMIG).
func (b *Builder) Devices(inv *gpu.Inventory) ([]resourceapi.Device, error) {
	pub, err := b.build(inv)
	if err != nil {
		return nil, err
	}
	return pub.devices, nil
}

// Pool is what a driver publishes for one node: one pool's slices in publishing order. The
// kubelet-plugin core (draplugin) publishes it through the kubelet-plugin helper; ResourceSlices
// turns it into complete objects. It is resourcepool.Pool, which drivers of other devices use.
type Pool = resourcepool.Pool

// Slice is the content of one ResourceSlice (resourcepool.Slice).
type Slice = resourcepool.Slice

// Build returns the pool of one node (named poolName, usually the node name). Devices are
// chunked into slices within the API limits; shared counters, when any, come first in slices
// of their own.
func (b *Builder) Build(poolName string, inv *gpu.Inventory) (*Pool, error) {
	if err := ValidateDriverName(b.driverName); err != nil {
		return nil, err
	}
	if err := ValidatePoolName(poolName); err != nil {
		return nil, err
	}
	pub, err := b.build(inv)
	if err != nil {
		return nil, err
	}
	return resourcepool.New(poolName, pub.devices, resourcepool.WithSharedCounters(pub.counterSets),
		resourcepool.WithMaxDevicesPerSlice(b.maxDevices))
}

type published struct {
	devices     []resourceapi.Device
	refs        []PublishedDevice // parallel to devices
	counterSets []resourceapi.CounterSet
}

func (b *Builder) build(inv *gpu.Inventory) (*published, error) {
	if err := b.validateOptions(); err != nil {
		return nil, err
	}
	if inv == nil {
		return nil, fmt.Errorf("inventory is nil")
	}
	pub := &published{}
	seen := map[string]string{}
	add := func(d resourceapi.Device, ref PublishedDevice, owner string) error {
		if prev, dup := seen[d.Name]; dup {
			return fmt.Errorf("device name %q is used by both %s and %s", d.Name, prev, owner)
		}
		seen[d.Name] = owner
		for _, taints := range b.taints {
			d.Taints = append(d.Taints, taints(d.Name)...)
		}
		ref.Name = d.Name
		pub.devices = append(pub.devices, d)
		pub.refs = append(pub.refs, ref)
		return nil
	}
	// Counter sets and dynamic partitions follow the GPUs' index order; the GPUs' own devices
	// are published in gpuOrder.
	var dyns []*dynamicMIG
	perGPU := make([]gpuPublished, len(inv.GPUs))
	vfios := make([]*vfioDevice, len(inv.GPUs))
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		devs, refs, dyn, err := b.gpuDevices(inv, g)
		if err != nil {
			return nil, fmt.Errorf("GPU %d (%s): %w", g.Index, g.UUID, err)
		}
		if dyn != nil {
			pub.counterSets = append(pub.counterSets, dyn.counters)
			dyns = append(dyns, dyn)
		}
		var set *resourceapi.CounterSet
		if vfios[i], set = b.vfioDevice(inv, g, devs, refs, dyn); set != nil {
			pub.counterSets = append(pub.counterSets, *set)
		}
		perGPU[i] = gpuPublished{devs, refs}
	}
	addGPUs := func() error {
		for _, o := range b.gpuDevicesInOrder(inv, perGPU) {
			if err := add(o.device, o.ref, o.owner); err != nil {
				return err
			}
		}
		return nil
	}
	addPartitions := func() error {
		for _, p := range orderPartitions(dyns) {
			if err := add(p.device, p.ref, p.owner); err != nil {
				return err
			}
		}
		return nil
	}
	steps := []func() error{addGPUs, addPartitions}
	if b.partitionsFirst {
		steps = []func() error{addPartitions, addGPUs}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := b.addVFIO(inv, vfios, add); err != nil {
		return nil, err
	}
	return pub, nil
}

// gpuPublished are the devices one GPU publishes itself (gpuDevices) and what each is.
type gpuPublished struct {
	devs []resourceapi.Device
	refs []PublishedDevice
}

// gpuDevicesInOrder lists the GPUs' own devices (full GPUs, static MIG devices) in publishing
// order: GPU by GPU in gpuOrder, each GPU's devices in their order, or, with
// WithMIGDevicesByProfile, the MIG devices grouped by profile after the full GPUs.
func (b *Builder) gpuDevicesInOrder(inv *gpu.Inventory, perGPU []gpuPublished) []ownedDevice {
	var order []ownedDevice
	for _, i := range b.gpuOrder(inv) {
		g := &inv.GPUs[i]
		owner := fmt.Sprintf("GPU %d (%s)", g.Index, g.UUID)
		for k, d := range perGPU[i].devs {
			order = append(order, ownedDevice{d, perGPU[i].refs[k], owner})
		}
	}
	if b.migByProfile {
		groupMIGByProfile(order)
	}
	return order
}

// gpuDevices returns the devices one GPU publishes in GPU order (the full GPU, static MIG
// devices) and what each is, and its dynamic MIG partitions and counters when it is published
// dynamically.
func (b *Builder) gpuDevices(inv *gpu.Inventory, g *gpu.GPU) ([]resourceapi.Device, []PublishedDevice, *dynamicMIG, error) {
	if b.migLookup != nil && g.MIGCapable {
		dyn, err := b.dynamicMIGDevices(inv, g)
		if err != nil {
			return nil, nil, nil, err
		}
		if dyn != nil {
			if dyn.full != nil {
				return []resourceapi.Device{*dyn.full}, []PublishedDevice{{GPU: g}}, dyn, nil
			}
			return nil, nil, dyn, nil
		}
	}
	if g.MIGEnabled {
		devs := make([]resourceapi.Device, 0, len(g.MIGDevices))
		refs := make([]PublishedDevice, 0, len(g.MIGDevices))
		for j := range g.MIGDevices {
			m := &g.MIGDevices[j]
			devs = append(devs, b.migDevice(inv, g, m))
			refs = append(refs, PublishedDevice{GPU: g, MIG: m})
		}
		return devs, refs, nil, nil
	}
	return []resourceapi.Device{b.gpuDevice(inv, g)}, []PublishedDevice{{GPU: g}}, nil, nil
}

func (b *Builder) commonAttributes(inv *gpu.Inventory, g *gpu.GPU) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{AttrProductName: str(g.ProductName)}
	// Brand and architecture are left out where the GPU did not report them (NOT_SUPPORTED).
	if g.Brand != "" {
		attrs[AttrBrand] = str(g.Brand)
	}
	if g.Architecture != "" {
		attrs[AttrArchitecture] = str(g.Architecture)
	}
	setVersion(attrs, AttrCudaComputeCapability, g.CudaComputeCapability)
	setVersion(attrs, AttrDriverVersion, inv.DriverVersion)
	setVersion(attrs, AttrCudaDriverVersion, inv.CUDADriverVersion)
	if g.PCIBusID != "" {
		attrs[StdAttrPCIBusID] = str(g.PCIBusID)
		if root := b.pcieRootOf(g); root != "" {
			attrs[StdAttrPCIeRoot] = str(root)
		}
	}
	if g.NUMANode >= 0 {
		attrs[StdAttrNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g.NUMANode))}
	}
	b.setPlacement(attrs, g)
	return attrs
}

func (b *Builder) gpuDevice(inv *gpu.Inventory, g *gpu.GPU) resourceapi.Device {
	attrs := b.commonAttributes(inv, g)
	attrs[AttrType] = str(DeviceTypeGPU)
	attrs[AttrUUID] = str(g.UUID)
	attrs[AttrIndex] = intAttr(g.Index)
	attrs[AttrMinor] = intAttr(g.Minor)
	capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapMemory: {Value: *resource.NewQuantity(int64(g.MemoryBytes), resource.BinarySI)},
	}
	if g.Multiprocessors > 0 {
		capacity[CapMultiprocessors] = count(g.Multiprocessors)
	}
	d := resourceapi.Device{Name: GPUDeviceName(g.Minor), Attributes: attrs, Capacity: capacity}
	// A GPU partitioned by dynamic MIG consumes counters per allocation, so it cannot also be
	// shared by memory.
	dynamicallyPartitioned := b.migLookup != nil && g.MIGCapable
	if b.consumable != nil && !dynamicallyPartitioned {
		b.consumable.apply(&d, g.MemoryBytes)
	}
	return d
}

func (b *Builder) migDevice(inv *gpu.Inventory, g *gpu.GPU, m *gpu.MIGDevice) resourceapi.Device {
	attrs := b.commonAttributes(inv, g)
	attrs[AttrType] = str(DeviceTypeMIG)
	attrs[AttrUUID] = str(m.UUID)
	attrs[AttrProfile] = str(m.Profile)
	attrs[AttrParentUUID] = str(g.UUID)
	attrs[AttrParentIndex] = intAttr(g.Index)
	return resourceapi.Device{
		Name:       MIGDeviceNameOf(m),
		Attributes: attrs,
		Capacity:   migCapacity(m.MemoryBytes, m.Multiprocessors, m.CopyEngines, m.Decoders, m.Encoders, m.JpegEngines, m.OfaEngines),
	}
}

// MIGDeviceNameOf is the DRA device name of an existing MIG device, as the Builder publishes
// it. The name carries the GPU-instance profile, as in dynamic mode, so the same placement has
// the same name in both; a compute instance smaller than its GPU instance ("1c.3g.20gb") gets a
// "ci<id>" suffix so that the compute instances sharing one GPU instance stay distinct.
func MIGDeviceNameOf(m *gpu.MIGDevice) string {
	if m == nil {
		return ""
	}
	giProfile, suffix := m.Profile, ""
	if p, err := mig.ParseProfile(m.Profile); err == nil && p.IsComputeInstance() {
		giProfile, suffix = p.GPUInstance().String(), fmt.Sprintf("ci%d", m.CIID)
	}
	return MIGDeviceName(MIGName{ParentMinor: m.ParentMinor, Profile: giProfile, GIProfileID: m.GIProfileID, PlacementStart: m.Placement.Start, CISuffix: suffix})
}

func migCapacity(memBytes uint64, sms, ce, dec, enc, jpeg, ofa int) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapMemory:          {Value: *resource.NewQuantity(int64(memBytes), resource.BinarySI)},
		CapMultiprocessors: count(sms),
		CapCopyEngines:     count(ce),
		CapDecoders:        count(dec),
		CapEncoders:        count(enc),
		CapJpegEngines:     count(jpeg),
		CapOfaEngines:      count(ofa),
	}
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }

func intAttr(n int) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{IntValue: ptr.To(int64(n))}
}

func count(n int) resourceapi.DeviceCapacity {
	return resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(n), resource.DecimalSI)}
}

func setVersion(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, name resourceapi.QualifiedName, v string) {
	if v != "" {
		attrs[name] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
}

// validateOptions refuses option values no slice can carry: a negative device limit, negative
// consumable-memory quantities.
func (b *Builder) validateOptions() error {
	if b.maxDevices < 0 {
		return fmt.Errorf("gpudra: WithMaxDevicesPerSlice(%d): want a positive number of devices, or 0 for the API limit", b.maxDevices)
	}
	if b.migByProfile && b.migLookup != nil {
		return fmt.Errorf("gpudra: WithMIGDevicesByProfile orders existing (static) MIG devices; it cannot be combined with WithDynamicMIG, whose partitions are always grouped by profile")
	}
	if c := b.consumable; c != nil {
		for name, q := range map[string]resource.Quantity{"Step": c.Step, "Default": c.Default} {
			if q.Sign() < 0 {
				return fmt.Errorf("gpudra: WithConsumableMemory: %s %s: must not be negative (zero: the default)", name, q.String())
			}
		}
	}
	return nil
}
