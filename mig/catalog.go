package mig

// Placement is where a GPU instance sits on its GPU, counted in memory slices exactly as NVML's
// nvmlGpuInstancePlacement_t counts them: a 3g profile on an A100 has Size 4, a 7g profile Size 8.
type Placement struct {
	// Start is the index of the first memory slice the instance occupies.
	Start int `json:"start"`
	// Size is the number of memory slices the instance occupies.
	Size int `json:"size"`
}

// End returns the index one past the last memory slice of the placement.
func (p Placement) End() int { return p.Start + p.Size }

// Overlaps reports whether two placements share a memory slice.
func (p Placement) Overlaps(q Placement) bool { return p.Start < q.End() && q.Start < p.End() }

// ComputeProfile is a compute-instance profile available inside a GPU-instance profile.
type ComputeProfile struct {
	// Enum is NVML's COMPUTE_INSTANCE_PROFILE_* value.
	Enum int `json:"enum"`
	// ID is the profile Id NVML reports for this compute-instance profile.
	ID int `json:"id"`
	// Slices is the number of compute slices (the "c" of "1c.3g.20gb").
	Slices int `json:"slices"`
	// InstanceCount is how many compute instances of this profile fit in one GPU instance.
	InstanceCount int `json:"instanceCount"`
	// Multiprocessors is the SM count of one compute instance.
	Multiprocessors int `json:"multiprocessors"`
	// Placements are the allowed compute-slice start indexes (each of size Slices).
	Placements []int `json:"placements,omitempty"`
}

// GIProfile is a GPU-instance profile of one GPU model: what one instance gets and where it may sit.
type GIProfile struct {
	// Name is the canonical profile name, e.g. "1g.5gb", "1g.10gb+me", "1g.24gb+gfx".
	Name string `json:"name"`
	// Enum is NVML's GPU_INSTANCE_PROFILE_* value (the argument of GetGpuInstanceProfileInfo).
	Enum int `json:"enum"`
	// ID is the profile Id NVML reports in GpuInstanceProfileInfo.Id and that nvidia-smi mig -lgip
	// shows (19 for 1g.5gb on an A100). It is not the enum.
	ID int `json:"id"`
	// ComputeSlices is the number of compute slices (the "g" of the name).
	ComputeSlices int `json:"computeSlices"`
	// MemoryMiB is the instance memory in MiB, as NVML's MemorySizeMB reports it.
	MemoryMiB uint64 `json:"memoryMiB"`
	// Multiprocessors is the number of SMs of the instance.
	Multiprocessors int `json:"multiprocessors"`
	// CopyEngines, Decoders, Encoders, JpegEngines and OfaEngines count the instance's engines.
	CopyEngines int `json:"copyEngines"`
	Decoders    int `json:"decoders"`
	Encoders    int `json:"encoders"`
	JpegEngines int `json:"jpegEngines"`
	OfaEngines  int `json:"ofaEngines"`
	// InstanceCount is the most instances of this profile one GPU can hold.
	InstanceCount int `json:"instanceCount"`
	// Placements are the allowed placements, in memory slices.
	Placements []Placement `json:"placements"`
	// ComputeProfiles are the compute-instance profiles available inside one instance.
	ComputeProfiles []ComputeProfile `json:"computeProfiles,omitempty"`
}

// Model is the MIG geometry of one GPU model.
type Model struct {
	// Name is the canonical model name, e.g. "A100-SXM4-40GB", "H100 80GB HBM3".
	Name string `json:"name"`
	// ProductNames are the NVML product names (without the "NVIDIA " prefix) this model answers to.
	ProductNames []string `json:"productNames"`
	// PCIDeviceIDs are the PCI device ids (0x20B010DE style) of this model.
	PCIDeviceIDs []uint32 `json:"pciDeviceIDs,omitempty"`
	// Architecture is the NVML architecture name, e.g. "Ampere", "Hopper", "Blackwell".
	Architecture string `json:"architecture"`
	// CudaComputeCapability is "major.minor", e.g. "8.0".
	CudaComputeCapability string `json:"cudaComputeCapability"`
	// MemoryMiB is the whole GPU's memory in MiB.
	MemoryMiB uint64 `json:"memoryMiB"`
	// Multiprocessors is the whole GPU's SM count.
	Multiprocessors int `json:"multiprocessors"`
	// MemorySlices is the number of memory slices (8 on A100/H100/B200, 4 on A30).
	MemorySlices int `json:"memorySlices"`
	// ComputeSlices is the number of compute slices (7 on A100/H100/B200, 4 on A30).
	ComputeSlices int `json:"computeSlices"`
	// Profiles are the GPU-instance profiles of the model.
	Profiles []GIProfile `json:"profiles"`
}
