package mig

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

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
	// CopyEngines is the number of copy engines of the instance.
	CopyEngines int `json:"copyEngines"`
	// Decoders is the number of video decoders (NVDEC) of the instance.
	Decoders int `json:"decoders"`
	// Encoders is the number of video encoders (NVENC) of the instance.
	Encoders int `json:"encoders"`
	// JpegEngines is the number of JPEG decoders (NVJPG) of the instance.
	JpegEngines int `json:"jpegEngines"`
	// OfaEngines is the number of optical flow accelerators (OFA) of the instance.
	OfaEngines int `json:"ofaEngines"`
	// InstanceCount is the most instances of this profile one GPU can hold.
	InstanceCount int `json:"instanceCount"`
	// Placements are the allowed placements, in memory slices.
	Placements []Placement `json:"placements"`
	// ComputeProfiles are the compute-instance profiles available inside one instance.
	ComputeProfiles []ComputeProfile `json:"computeProfiles,omitempty"`
	// Sources says, field by field, where the values come from (a hardware recording, NVIDIA's
	// documentation, inference, or the device itself).
	Sources ProfileSources `json:"sources,omitzero"`
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

// MemorySlices returns the number of memory slices one instance of the profile occupies (the Size of
// its placements), or 0 if the profile has no placements.
func (p *GIProfile) MemorySlices() int {
	if len(p.Placements) == 0 {
		return 0
	}
	return p.Placements[0].Size
}

// AllowsPlacement reports whether pl is one of the profile's allowed placements.
func (p *GIProfile) AllowsPlacement(pl Placement) bool {
	for _, q := range p.Placements {
		if q == pl {
			return true
		}
	}
	return false
}

// Profile returns the GPU-instance profile with the given name. The name is matched after parsing,
// so "1c.1g.5gb" finds "1g.5gb" and attribute order does not matter; compute-instance forms such as
// "1c.3g.20gb" find their GPU-instance profile ("3g.20gb").
func (m *Model) Profile(name string) (*GIProfile, bool) {
	for i := range m.Profiles {
		if m.Profiles[i].Name == name {
			return &m.Profiles[i], true
		}
	}
	p, err := ParseProfile(name)
	if err != nil {
		return nil, false
	}
	want := p.GPUInstance().String()
	for i := range m.Profiles {
		if m.Profiles[i].Name == want {
			return &m.Profiles[i], true
		}
	}
	return nil, false
}

// ProfileByID returns the GPU-instance profile whose NVML profile Id (GpuInstanceProfileInfo.Id,
// GpuInstanceInfo.ProfileId) is id.
func (m *Model) ProfileByID(id int) (*GIProfile, bool) {
	for i := range m.Profiles {
		if m.Profiles[i].ID == id {
			return &m.Profiles[i], true
		}
	}
	return nil, false
}

// ProfileByEnum returns the GPU-instance profile whose NVML GPU_INSTANCE_PROFILE_* enum is enum.
func (m *Model) ProfileByEnum(enum int) (*GIProfile, bool) {
	for i := range m.Profiles {
		if m.Profiles[i].Enum == enum {
			return &m.Profiles[i], true
		}
	}
	return nil, false
}

// ProfileNames returns the names of the model's GPU-instance profiles in catalog order.
func (m *Model) ProfileNames() []string {
	out := make([]string, len(m.Profiles))
	for i := range m.Profiles {
		out[i] = m.Profiles[i].Name
	}
	return out
}

// Clone returns a deep copy of the model.
func (m *Model) Clone() *Model {
	c := *m
	c.ProductNames = slices.Clone(m.ProductNames)
	c.PCIDeviceIDs = slices.Clone(m.PCIDeviceIDs)
	c.Profiles = make([]GIProfile, len(m.Profiles))
	for i, p := range m.Profiles {
		p.Placements = slices.Clone(p.Placements)
		p.ComputeProfiles = slices.Clone(p.ComputeProfiles)
		for j := range p.ComputeProfiles {
			p.ComputeProfiles[j].Placements = slices.Clone(p.ComputeProfiles[j].Placements)
		}
		c.Profiles[i] = p
	}
	return &c
}

// catalog is built once, on first use, and never modified; every exported accessor hands out deep
// copies of it.
var catalog = sync.OnceValue(buildCatalog)

// Models returns the built-in catalog: one entry per GPU model, in a fixed order. The result is a
// fresh deep copy on every call, so callers may modify it freely.
func Models() []*Model {
	src := catalog()
	out := make([]*Model, len(src))
	for i, m := range src {
		out[i] = m.Clone()
	}
	return out
}

// ModelNames returns the canonical names of the catalog models, in catalog order.
func ModelNames() []string {
	src := catalog()
	out := make([]string, len(src))
	for i, m := range src {
		out[i] = m.Name
	}
	return out
}

// UnknownModelError is returned by Lookup and LookupPCIDeviceID when no catalog model matches.
type UnknownModelError struct {
	// Query is what was looked up (a product name or a PCI device id in 0x%08X form).
	Query string
	// Known are the canonical names of the catalog models.
	Known []string
}

// Error implements error.
func (e *UnknownModelError) Error() string {
	return fmt.Sprintf("unknown MIG-capable GPU model %q: known models are %s", e.Query, strings.Join(e.Known, ", "))
}

// normalizeProductName lower-cases a product name, trims spaces and drops an optional "NVIDIA " prefix.
func normalizeProductName(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimPrefix(s, "nvidia ")
	return strings.Join(strings.Fields(s), " ")
}

// Lookup returns a copy of the catalog model for an NVML product name (as nvmlDeviceGetName
// reports it, e.g. "NVIDIA A100-SXM4-40GB") or a canonical model name. The "NVIDIA " prefix is
// optional, the match is case-insensitive and runs of spaces are treated as one. The error is an
// *UnknownModelError that lists the known models.
func Lookup(productName string) (*Model, error) {
	q := normalizeProductName(productName)
	for _, m := range catalog() {
		if normalizeProductName(m.Name) == q {
			return m.Clone(), nil
		}
		for _, n := range m.ProductNames {
			if normalizeProductName(n) == q {
				return m.Clone(), nil
			}
		}
	}
	return nil, &UnknownModelError{Query: productName, Known: ModelNames()}
}

// LookupPCIDeviceID returns a copy of the catalog model with the given PCI device id in NVML's
// combined form (device id in the high 16 bits, vendor id 0x10DE in the low 16 bits, e.g. 0x20B010DE).
func LookupPCIDeviceID(id uint32) (*Model, error) {
	for _, m := range catalog() {
		if slices.Contains(m.PCIDeviceIDs, id) {
			return m.Clone(), nil
		}
	}
	return nil, &UnknownModelError{Query: fmt.Sprintf("0x%08X", id), Known: ModelNames()}
}
