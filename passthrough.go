package gpudra

import (
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/gpu"
)

const (
	// VFIODeviceClassName selects GPUs for passthrough to a virtual machine (KubeVirt, Kata):
	// devices of type vfio.
	VFIODeviceClassName = "vfio.gpu.nvidia.com"
	// DeviceTypeVFIO is the value of the "type" attribute of a GPU published for passthrough.
	DeviceTypeVFIO = "vfio"
	// AttrIOMMUGroup is the IOMMU group of a GPU published for passthrough: the group's
	// device node is /dev/vfio/<iommuGroup>.
	AttrIOMMUGroup resourceapi.QualifiedName = "iommuGroup"
	// CounterGPU is the one counter of the counter set of a GPU published both as itself and
	// for passthrough without dynamic MIG: each of the two consumes it whole.
	CounterGPU = "gpu"
)

// VFIODeviceName is the DRA device name of the GPU with the given minor published for
// passthrough: "gpu-<minor>-vfio".
func VFIODeviceName(minor int) string { return "gpu-" + strconv.Itoa(minor) + "-vfio" }

// PassthroughFunc says whether a GPU can be passed through to a virtual machine (its IOMMU is
// on, vfio-pci is available) and returns its IOMMU group. It is called once per GPU per build
// and must not block: a driver looks the groups up once (vfio.Binder.Group) and answers from
// memory.
type PassthroughFunc func(g *gpu.GPU) (iommuGroup int, ok bool)

// Passthrough is set on a PublishedDevice that is a GPU published for passthrough: preparing it
// binds the GPU's IOMMU group to vfio-pci.
type Passthrough struct {
	// IOMMUGroup is the GPU's IOMMU group number.
	IOMMUGroup int
}

// WithPassthrough publishes each GPU for which f answers ok a second time, as a device of type
// vfio ("gpu-<minor>-vfio", with the GPU's attributes, its PCI address in
// resource.kubernetes.io/pciBusID and its IOMMU group in iommuGroup) that the DeviceClass
// vfio.gpu.nvidia.com selects. The GPU and its vfio device exclude each other through a shared
// counter set, so the scheduler gives a GPU to a container or to a virtual machine, never both:
//
//   - without dynamic MIG, the GPU gets a counter set of one counter (CounterGPU) that the full
//     GPU and the vfio device each consume whole;
//   - with dynamic MIG, the vfio device consumes every counter of the GPU's counter set, as the
//     full GPU does, so it excludes every MIG partition and a partition excludes it.
//
// A vfio device is published exactly where the full GPU is: not for a GPU in static MIG mode,
// nor while MIG instances the driver did not create are on it. vfio devices follow every other
// device, in the reverse of the GPUs' order, so the scheduler's first fit gives virtual machines
// GPUs from the other end than containers. The counters need FeaturePartitionableDevices:
// WithoutFeatures(FeaturePartitionableDevices) turns passthrough off. Without this option (the
// default) nothing changes.
func WithPassthrough(f PassthroughFunc) Option { return func(b *Builder) { b.passthrough = f } }

// Passthrough returns the PassthroughFunc of WithPassthrough, nil when GPUs are not published for
// passthrough.
func (b *Builder) Passthrough() PassthroughFunc { return b.passthrough }

// vfioDevice returns the vfio device of a GPU, and the counter set that a GPU published without
// dynamic MIG needs (devs[0], the full GPU, then consumes it too); nil, nil when the GPU is not
// published for passthrough.
func (b *Builder) vfioDevice(inv *gpu.Inventory, g *gpu.GPU, devs []resourceapi.Device, refs []PublishedDevice, dyn *dynamicMIG) (*vfioDevice, *resourceapi.CounterSet) {
	if b.passthrough == nil {
		return nil, nil
	}
	group, ok := b.passthrough(g)
	if !ok || group < 0 {
		return nil, nil
	}
	var full *resourceapi.Device
	switch {
	case dyn != nil:
		full = dyn.full
	case len(devs) == 1 && refs[0].MIG == nil && refs[0].Partition == nil:
		full = &devs[0]
	}
	if full == nil {
		return nil, nil
	}
	d := b.gpuDevice(inv, g)
	d.Name = VFIODeviceName(g.Minor)
	d.Attributes[AttrType] = str(DeviceTypeVFIO)
	d.Attributes[AttrIOMMUGroup] = intAttr(group)
	// A virtual machine gets the whole GPU: no memory shares.
	d.AllowMultipleAllocations = nil
	mem := d.Capacity[CapMemory]
	mem.RequestPolicy = nil
	d.Capacity[CapMemory] = mem
	for name, c := range d.Capacity {
		c.RequestPolicy = nil
		d.Capacity[name] = c
	}
	v := &vfioDevice{device: d, ref: PublishedDevice{GPU: g, Passthrough: &Passthrough{IOMMUGroup: group}}}
	if dyn != nil {
		for _, c := range full.ConsumesCounters {
			v.device.ConsumesCounters = append(v.device.ConsumesCounters, *c.DeepCopy())
		}
		return v, nil
	}
	set := resourceapi.CounterSet{Name: CounterSetName(g.Minor), Counters: map[string]resourceapi.Counter{CounterGPU: qty(1)}}
	consume := func() []resourceapi.DeviceCounterConsumption {
		return []resourceapi.DeviceCounterConsumption{{CounterSet: set.Name, Counters: map[string]resourceapi.Counter{CounterGPU: qty(1)}}}
	}
	full.ConsumesCounters = consume()
	v.device.ConsumesCounters = consume()
	return v, &set
}

// addVFIO adds the vfio devices (by GPU index, nil for none) after every other device, in the
// reverse of the GPUs' order.
func (b *Builder) addVFIO(inv *gpu.Inventory, vfios []*vfioDevice, add func(resourceapi.Device, PublishedDevice, string) error) error {
	order := b.gpuOrder(inv)
	for k := len(order) - 1; k >= 0; k-- {
		if v := vfios[order[k]]; v != nil {
			g := &inv.GPUs[order[k]]
			if err := add(v.device, v.ref, fmt.Sprintf("GPU %d (%s) for passthrough", g.Index, g.UUID)); err != nil {
				return err
			}
		}
	}
	return nil
}

type vfioDevice struct {
	device resourceapi.Device
	ref    PublishedDevice
}
