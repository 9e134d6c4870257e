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
	// Errors are the GPUs that failed during enumeration and were skipped (see SkipFailedGPUs),
	// ordered by index. Empty when every GPU was enumerated.
	Errors []*DeviceError `json:"errors,omitempty"`
}

// GPU is one physical GPU.
type GPU struct {
	Index       int    `json:"index"`
	Minor       int    `json:"minor"`
	UUID        string `json:"uuid"`
	ProductName string `json:"productName"`
	Brand       string `json:"brand"`
	// Architecture is the NVML architecture name: Kepler, Maxwell, Pascal, Volta, Turing, Ampere,
	// "Ada Lovelace", Hopper, Blackwell, or "Unknown".
	Architecture string `json:"architecture"`
	// CudaComputeCapability is "major.minor.0", a semantic version.
	CudaComputeCapability string `json:"cudaComputeCapability"`
	MemoryBytes           uint64 `json:"memoryBytes"`
	Multiprocessors       int    `json:"multiprocessors,omitempty"`
	// PCIBusID is the canonical lower-case "dddd:bb:dd.f" address; "" when NVML reports none,
	// or when it reports the same one for two GPUs (it then identifies neither).
	PCIBusID    string `json:"pciBusID"`
	PCIDeviceID uint32 `json:"pciDeviceID"`
	// NUMANode is the GPU's NUMA node, or -1 when unknown.
	NUMANode int `json:"numaNode"`
	// MIGCapable says whether the GPU supports MIG at all.
	MIGCapable bool `json:"migCapable"`
	// MIGEnabled is the current MIG mode; MIGPending the mode after the next reset.
	MIGEnabled bool `json:"migEnabled"`
	MIGPending bool `json:"migPending"`
	// MIGDevices are the MIG devices that exist now (static MIG).
	MIGDevices []MIGDevice `json:"migDevices,omitempty"`
	// MIGGeometry is the MIG geometry the GPU reports through NVML, for a MIG-capable GPU
	// (nil otherwise, or when enumerated with ReadMIGGeometry(false)). GPUs of one product share
	// one value, which must not be modified.
	MIGGeometry *MIGGeometry `json:"-"`
}

// MIGGeometry is what a MIG-capable GPU says about its own MIG profiles, and how the mig
// catalog differs from it. A driver validates layouts, publishes partitions and creates
// instances with Model, not with the catalog: a GPU the catalog does not know, or a driver
// release that changed a profile's memory, then just works.
type MIGGeometry struct {
	// Model is the geometry read from the device (mig.DeviceModel); nil when NVML would not
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
	UUID        string `json:"uuid"`
	ParentUUID  string `json:"parentUUID"`
	ParentIndex int    `json:"parentIndex"`
	ParentMinor int    `json:"parentMinor"`
	// Profile is the canonical profile name ("1g.5gb", "1c.3g.20gb", "1g.10gb+me").
	Profile string `json:"profile"`
	// GIProfileID and CIProfileID are the NVML profile Ids (not enums).
	GIProfileID int           `json:"giProfileID"`
	CIProfileID int           `json:"ciProfileID"`
	GIID        int           `json:"giID"`
	CIID        int           `json:"ciID"`
	Placement   mig.Placement `json:"placement"`
	MemoryBytes uint64        `json:"memoryBytes"`
	// Engine and SM counts of the device.
	Multiprocessors int `json:"multiprocessors"`
	CopyEngines     int `json:"copyEngines"`
	Decoders        int `json:"decoders"`
	Encoders        int `json:"encoders"`
	JpegEngines     int `json:"jpegEngines"`
	OfaEngines      int `json:"ofaEngines"`
}
