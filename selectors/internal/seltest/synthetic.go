package seltest

import (
	"github.com/blang/semver/v4"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/selectors"
)

// SyntheticGPUs are GPUs no fake machine has, published the way the driver publishes a GPU,
// so that the seeds' T4 and V100 selectors can match something.
func SyntheticGPUs() []*selectors.Device {
	gpuDev := func(name, product, arch, cc, mem string) *selectors.Device {
		d := &resourceapi.Device{Name: name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				gpudra.AttrType:                  {StringValue: ptr.To("gpu")},
				gpudra.AttrProductName:           {StringValue: ptr.To(product)},
				gpudra.AttrBrand:                 {StringValue: ptr.To("Nvidia")},
				gpudra.AttrArchitecture:          {StringValue: ptr.To(arch)},
				gpudra.AttrCudaComputeCapability: {VersionValue: ptr.To(cc)},
				gpudra.AttrDriverVersion:         {VersionValue: ptr.To("535.161.7")},
				gpudra.AttrCudaDriverVersion:     {VersionValue: ptr.To("12.2.0")},
				gpudra.AttrIndex:                 {IntValue: ptr.To[int64](0)},
				gpudra.AttrUUID:                  {StringValue: ptr.To("GPU-" + name)},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{gpudra.CapMemory: {Value: resource.MustParse(mem)}},
		}
		return selectors.NewDevice(gpudra.DefaultDriverName, "synthetic", d)
	}
	return []*selectors.Device{
		gpuDev("t4", "Tesla T4", "Turing", "7.5.0", "15360Mi"),
		gpuDev("v100-16", "Tesla V100-SXM2-16GB", "Volta", "7.0.0", "16160Mi"),
		gpuDev("v100-32", "Tesla V100-SXM2-32GB", "Volta", "7.0.0", "32768Mi"),
	}
}

// StringAttr is a string attribute of a device, "" when it has none.
func StringAttr(d *selectors.Device, name resourceapi.QualifiedName) string {
	a, _ := d.Attribute(name)
	if a.StringValue == nil {
		return ""
	}
	return *a.StringValue
}

// VersionAttr is a version attribute of a device, the zero version when it has none.
func VersionAttr(d *selectors.Device, name resourceapi.QualifiedName) semver.Version {
	a, _ := d.Attribute(name)
	if a.VersionValue == nil {
		return semver.Version{}
	}
	return semver.MustParse(*a.VersionValue)
}

// Memory is the memory capacity of a device.
func Memory(d *selectors.Device) resource.Quantity {
	return d.Device.Capacity[gpudra.CapMemory].Value
}
