package mig

// Source says where a value of a GPU-instance profile comes from, so that a reader (and a driver
// deciding whether to trust the catalog) can tell a value printed by hardware from one derived by
// arithmetic.
type Source string

// The sources of profile values, from most to least trustworthy.
const (
	// SourceDevice: read from NVML on the GPU itself (nvmlmig.ModelFromDevice).
	SourceDevice Source = "device"
	// SourceRecorded: printed by nvidia-smi on this GPU model in a public recording that gpudra
	// keeps as a test fixture (gpu/gputest/printouts); a test compares the catalog with it field
	// by field.
	SourceRecorded Source = "recorded"
	// SourceDocumented: stated by NVIDIA (the MIG User Guide, mig-parted's built-in configuration,
	// or nvidia-smi output NVIDIA staff quoted in a public issue) but not kept as a fixture.
	SourceDocumented Source = "documented"
	// SourceInferred: derived from another model's geometry or from arithmetic; not confirmed for
	// this model. A driver should prefer nvmlmig.DeviceModel and report the differences (Compare).
	SourceInferred Source = "inferred"
)

// ProfileSources says, field by field, where a GIProfile's values come from. The zero value means
// "not stated".
type ProfileSources struct {
	// ID covers GIProfile.ID.
	ID Source `json:"id,omitempty"`
	// Memory covers GIProfile.MemoryMiB.
	Memory Source `json:"memory,omitempty"`
	// Multiprocessors covers GIProfile.Multiprocessors.
	Multiprocessors Source `json:"multiprocessors,omitempty"`
	// CopyEngines covers GIProfile.CopyEngines.
	CopyEngines Source `json:"copyEngines,omitempty"`
	// MediaEngines covers Decoders, Encoders, JpegEngines and OfaEngines.
	MediaEngines Source `json:"mediaEngines,omitempty"`
	// InstanceCount covers GIProfile.InstanceCount.
	InstanceCount Source `json:"instanceCount,omitempty"`
	// Placements covers GIProfile.Placements.
	Placements Source `json:"placements,omitempty"`
}

// allSources returns ProfileSources with every field set to s.
func allSources(s Source) ProfileSources {
	return ProfileSources{ID: s, Memory: s, Multiprocessors: s, CopyEngines: s, MediaEngines: s, InstanceCount: s, Placements: s}
}

// Lowest returns the least trustworthy source among the fields that are set, or "" when none is.
func (s ProfileSources) Lowest() Source {
	rank := map[Source]int{SourceDevice: 1, SourceRecorded: 2, SourceDocumented: 3, SourceInferred: 4}
	var low Source
	for _, v := range []Source{s.ID, s.Memory, s.Multiprocessors, s.CopyEngines, s.MediaEngines, s.InstanceCount, s.Placements} {
		if rank[v] > rank[low] {
			low = v
		}
	}
	return low
}
