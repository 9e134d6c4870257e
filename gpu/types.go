package gpu

import "github.com/gpudra/gpudra/mig"

// Inventory is everything enumeration found on one node.
type Inventory struct {
	// DriverVersion is the kernel driver version as a semantic version ("580.126.9").
	DriverVersion string `json:"driverVersion"`
	// CUDADriverVersion is the CUDA driver API version as a semantic version ("13.0.0").
	CUDADriverVersion string `json:"cudaDriverVersion"`
	// GPUs are the physical GPUs, ordered by index.
	GPUs []GPU `json:"gpus"`
	// Errors are the GPUs that failed during enumeration and were skipped (see nvmlgpu.SkipFailedGPUs),
	// ordered by index. Empty when every GPU was enumerated.
	Errors []*DeviceError `json:"errors,omitempty"`
}

// GPU is one physical GPU.
type GPU struct {
	// Index is the NVML index, which can change across reboots and driver reloads.
	Index int `json:"index"`
	// Minor is the device node's minor number (/dev/nvidia<minor>), stable for the same hardware.
	Minor int `json:"minor"`
	// UUID is the GPU's UUID ("GPU-...").
	UUID string `json:"uuid"`
	// ProductName is NVML's product name ("NVIDIA A100-SXM4-40GB").
	ProductName string `json:"productName"`
	// Brand is NVML's brand name ("Nvidia", "Tesla", ...).
	Brand string `json:"brand"`
	// Architecture is the NVML architecture name: Kepler, Maxwell, Pascal, Volta, Turing, Ampere,
	// "Ada Lovelace", Hopper, Blackwell, or "Unknown".
	Architecture string `json:"architecture"`
	// CudaComputeCapability is "major.minor.0", a semantic version.
	CudaComputeCapability string `json:"cudaComputeCapability"`
	// MemoryBytes is the GPU's total memory in bytes.
	MemoryBytes uint64 `json:"memoryBytes"`
	// Multiprocessors is the number of SMs; 0 when NVML does not report it.
	Multiprocessors int `json:"multiprocessors,omitempty"`
	// PCIBusID is the canonical lower-case "dddd:bb:dd.f" address; "" when NVML reports none,
	// or when it reports the same one for two GPUs (it then identifies neither).
	PCIBusID string `json:"pciBusID"`
	// PCIDeviceID is the PCI device and vendor ID as NVML reports it (device ID in the high 16
	// bits, vendor 0x10de in the low 16).
	PCIDeviceID uint32 `json:"pciDeviceID"`
	// NUMANode is the GPU's NUMA node, or -1 when unknown.
	NUMANode int `json:"numaNode"`
	// MIGCapable says whether the GPU supports MIG at all.
	MIGCapable bool `json:"migCapable"`
	// MIGEnabled is the current MIG mode.
	MIGEnabled bool `json:"migEnabled"`
	// MIGPending is the MIG mode after the next GPU reset (differs from MIGEnabled while a
	// change waits for one).
	MIGPending bool `json:"migPending"`
	// MIGDevices are the MIG devices that exist now (static MIG).
	MIGDevices []MIGDevice `json:"migDevices,omitempty"`
	// MIGGeometry is the MIG geometry the GPU reports through NVML, for a MIG-capable GPU
	// (nil otherwise, or when enumerated with nvmlgpu.ReadMIGGeometry(false)). GPUs of one product share
	// one value, which must not be modified.
	MIGGeometry *MIGGeometry `json:"-"`
}

// MIGGeometry is what a MIG-capable GPU says about its own MIG profiles, and how the mig
// catalog differs from it. A driver validates layouts, publishes partitions and creates
// instances with Model, not with the catalog: a GPU the catalog does not know, or a driver
// release that changed a profile's memory, then just works.
type MIGGeometry struct {
	// Model is the geometry read from the device (nvmlmig.DeviceModel); nil when NVML would not
	// report it (Err says why), in which case the catalog is all there is.
	Model *mig.Model
	// CatalogDifferences are where the mig catalog differs from Model (mig.Compare): a driver
	// logs them once and counts them. A product the catalog does not know gives a single "model"
	// difference.
	CatalogDifferences []mig.Difference
	// Err is why Model could not be read.
	Err error
}

// MIGDevice is one existing MIG device: a compute instance inside a GPU instance.
type MIGDevice struct {
	// UUID is the MIG device's UUID ("MIG-...").
	UUID string `json:"uuid"`
	// ParentUUID is the UUID of the physical GPU holding the device.
	ParentUUID string `json:"parentUUID"`
	// ParentIndex is the NVML index of the physical GPU.
	ParentIndex int `json:"parentIndex"`
	// ParentMinor is the physical GPU's minor number (in the device name).
	ParentMinor int `json:"parentMinor"`
	// Profile is the canonical profile name ("1g.5gb", "1c.3g.20gb", "1g.10gb+me").
	Profile string `json:"profile"`
	// GIProfileID is NVML's GPU-instance profile ID (GpuInstanceProfileInfo.Id, not the
	// profile enum), as in the device name and mig profiles' PROFILE ID.
	GIProfileID int `json:"giProfileID"`
	// CIProfileID is NVML's compute-instance profile ID (ComputeInstanceProfileInfo.Id, not
	// the profile enum).
	CIProfileID int `json:"ciProfileID"`
	// GIID is the GPU-instance ID NVML assigned when the instance was created (nvidia-smi's
	// "GI ID"); not a profile ID, and only meaningful until the instance is destroyed.
	GIID int `json:"giID"`
	// CIID is the compute-instance ID within the GPU instance (nvidia-smi's "CI ID").
	CIID int `json:"ciID"`
	// Placement is the GPU instance's memory slices (start and size).
	Placement mig.Placement `json:"placement"`
	// MemoryBytes is the device's memory in bytes.
	MemoryBytes uint64 `json:"memoryBytes"`
	// Multiprocessors is the number of SMs of the device.
	Multiprocessors int `json:"multiprocessors"`
	// CopyEngines is the number of copy engines of the device.
	CopyEngines int `json:"copyEngines"`
	// Decoders is the number of video decoders (NVDEC) of the device.
	Decoders int `json:"decoders"`
	// Encoders is the number of video encoders (NVENC) of the device.
	Encoders int `json:"encoders"`
	// JpegEngines is the number of JPEG decoders (NVJPG) of the device.
	JpegEngines int `json:"jpegEngines"`
	// OfaEngines is the number of optical flow accelerators (OFA) of the device.
	OfaEngines int `json:"ofaEngines"`
}
