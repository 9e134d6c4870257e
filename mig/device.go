package mig

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// enumAttributes returns the name suffix NVML's profile enum implies ("+me", "-me", "+me.all",
// "+gfx" or "").
func enumAttributes(enum int) string {
	switch enum {
	case enum1SliceRev1, enum2SliceRev1:
		return "+" + AttributeMediaExtensions
	case enum1SliceNoME, enum2SliceNoME:
		return "-" + AttributeMediaExtensions
	case enum1SliceAllME, enum2SliceAllME:
		return "+" + AttributeMediaExtensionsAll
	case enum1SliceGfx, enum2SliceGfx, enum4SliceGfx, enum3SliceGfx:
		return "+" + AttributeGraphics
	}
	return ""
}

// ProfileName derives the canonical GPU-instance profile name the way NVIDIA's tools do: G compute
// slices, memory as the fraction of the GPU's memory rounded up to a multiple of 1/8 times the GPU
// memory in GiB rounded up, and the suffix implied by the NVML GPU_INSTANCE_PROFILE_* enum. It is
// the one formula for profiles the catalog does not name: the device model
// (nvmlmig.ModelFromDevice), the dynamic partitions built from it and the existing MIG devices
// nvmlgpu.Enumerate names all use it, so a placement has the same name in static and dynamic mode. Two profiles it names
// alike are told apart by DisambiguateProfileNames. With gpuMemoryMiB 0 (a GPU that reports no
// dedicated memory) the memory is memoryMiB in GiB, rounded up.
func ProfileName(enum, computeSlices int, memoryMiB, gpuMemoryMiB uint64) string {
	gb := int((memoryMiB + 1023) / 1024) // GPU memory unknown (unified memory): GiB, rounded up
	if gpuMemoryMiB > 0 {
		frac := math.Ceil(float64(memoryMiB)/float64(gpuMemoryMiB)*8) / 8
		gb = int(math.Round(frac * math.Ceil(float64(gpuMemoryMiB)/1024)))
	}
	return fmt.Sprintf("%dg.%dgb%s", computeSlices, gb, enumAttributes(enum))
}

// MergeCatalog turns a model read from a live GPU (mig/nvmlmig.ModelFromDevice) into the model
// a driver should use, in place, and returns where the built-in catalog differs from it. Profile
// info and placements stay as the GPU reported them, "+me", "-me", "+me.all" and "+gfx" variants
// included, whatever the catalog says, so a GPU the catalog does not know or a driver release that
// changed memory sizes just works. Compute-instance profiles, which NVML lists only through an
// existing GPU instance, come from the catalog profile with the same enum, or are derived from the
// GPU-instance profile when the catalog lacks it (inferred). When the catalog knows the GPU
// (Lookup of live.Name), live keeps the catalog's name, product names, PCI ids and SM count. The
// differences are Compare(catalog, live), meant to be logged once and counted; a GPU the catalog
// does not know gives a single "model" difference. A nil live model gives that difference too.
func MergeCatalog(live *Model) []Difference {
	if live == nil {
		return Compare(nil, nil)
	}
	table, err := Lookup(live.Name)
	if err != nil {
		fillComputeProfiles(live, nil)
		return []Difference{{Field: "model", Model: live.Name, Property: "model", Table: absent, Live: live.Name}}
	}
	diffs := Compare(table, live)
	fillComputeProfiles(live, table)
	live.Name, live.ProductNames, live.PCIDeviceIDs = table.Name, table.ProductNames, table.PCIDeviceIDs
	live.Multiprocessors = table.Multiprocessors
	return diffs
}

// fillComputeProfiles gives every live profile without compute-instance profiles the catalog's
// (same enum), or ones derived from its slice and SM counts.
func fillComputeProfiles(live, table *Model) {
	for i := range live.Profiles {
		p := &live.Profiles[i]
		if len(p.ComputeProfiles) > 0 {
			continue
		}
		if table != nil {
			if tp, ok := table.ProfileByEnum(p.Enum); ok && tp.ComputeSlices == p.ComputeSlices {
				p.ComputeProfiles = slices.Clone(tp.ComputeProfiles)
				for j := range p.ComputeProfiles {
					p.ComputeProfiles[j].Placements = slices.Clone(tp.ComputeProfiles[j].Placements)
					if p.ComputeProfiles[j].Slices == p.ComputeSlices {
						p.ComputeProfiles[j].Multiprocessors = p.Multiprocessors
					}
				}
				continue
			}
		}
		smPer := map[int]int{}
		for c := 1; c <= p.ComputeSlices; c++ {
			smPer[c] = p.Multiprocessors * c / max(1, p.ComputeSlices)
		}
		p.ComputeProfiles = computeProfiles(p.ComputeSlices, p.Multiprocessors, smPer)
	}
}

// Difference is one place where a catalog model and a live model disagree. It is plain data for
// a log line (String) or a metric (labels Model, Profile, Property).
type Difference struct {
	// Field is a path such as "memorySlices" or "profiles[1g.5gb].id".
	Field string
	// Model is the catalog model's name.
	Model string
	// Profile is the GPU-instance profile the difference is about, "" for whole-model fields.
	Profile string
	// Property is the field within the profile or model: "id", "memoryMiB", "placements",
	// "computeProfiles[1c].multiprocessors", or "" when a whole profile is absent on one side.
	Property string
	// Table is the catalog's value, "(absent)" when the catalog lacks it.
	Table string
	// Live is the hardware's value, "(absent)" when the hardware lacks it.
	Live string
}

// String formats the difference as "field: table X, live Y".
func (d Difference) String() string {
	return fmt.Sprintf("%s: table %s, live %s", d.Field, d.Table, d.Live)
}

const absent = "(absent)"

// Compare reports where a catalog model and a model read from hardware (nvmlmig.ModelFromDevice)
// disagree, as data: one Difference per field, with the model, profile and property named so that
// a driver can log them once and count them in a metric. Profiles are matched by NVML enum. Values
// the live model does not know (zero Multiprocessors, empty Architecture or compute capability, no
// compute profiles) are not compared. The result is empty when they agree; a nil model gives a single
// "model" difference.
func Compare(table, live *Model) []Difference {
	if table == nil || live == nil {
		d := Difference{Field: "model", Property: "model", Table: absent, Live: absent}
		if table != nil {
			d.Model, d.Table = table.Name, table.Name
		}
		if live != nil {
			d.Live = live.Name
		}
		return []Difference{d}
	}
	c := &comparer{model: table.Name}
	c.models(table, live)
	for i := range table.Profiles {
		tp := &table.Profiles[i]
		lp, ok := live.ProfileByEnum(tp.Enum)
		if !ok {
			c.out = append(c.out, Difference{Field: fmt.Sprintf("profiles[%s]", tp.Name), Model: table.Name, Profile: tp.Name,
				Table: fmt.Sprintf("enum %d", tp.Enum), Live: absent})
			continue
		}
		c.profiles(tp, lp)
	}
	for _, lp := range live.Profiles {
		if _, ok := table.ProfileByEnum(lp.Enum); !ok {
			c.out = append(c.out, Difference{Field: fmt.Sprintf("profiles[%s]", lp.Name), Model: table.Name, Profile: lp.Name,
				Table: absent, Live: fmt.Sprintf("enum %d id %d", lp.Enum, lp.ID)})
		}
	}
	return c.out
}

// comparer collects the differences Compare finds.
type comparer struct {
	model string
	out   []Difference
}

// add records a difference when t and l print differently.
func (c *comparer) add(profile, property string, t, l any) {
	ts, ls := fmt.Sprint(t), fmt.Sprint(l)
	if ts == ls {
		return
	}
	field := property
	if profile != "" {
		field = fmt.Sprintf("profiles[%s].%s", profile, property)
	}
	c.out = append(c.out, Difference{Field: field, Model: c.model, Profile: profile, Property: property, Table: ts, Live: ls})
}

func (c *comparer) models(table, live *Model) {
	c.add("", "memorySlices", table.MemorySlices, live.MemorySlices)
	c.add("", "computeSlices", table.ComputeSlices, live.ComputeSlices)
	if live.MemoryMiB != 0 {
		c.add("", "memoryMiB", table.MemoryMiB, live.MemoryMiB)
	}
	if live.Multiprocessors != 0 {
		c.add("", "multiprocessors", table.Multiprocessors, live.Multiprocessors)
	}
	if live.Architecture != "" {
		c.add("", "architecture", table.Architecture, live.Architecture)
	}
	if live.CudaComputeCapability != "" {
		c.add("", "cudaComputeCapability", table.CudaComputeCapability, live.CudaComputeCapability)
	}
}

func (c *comparer) profiles(tp, lp *GIProfile) {
	n := tp.Name
	c.add(n, "name", tp.Name, lp.Name)
	c.add(n, "id", tp.ID, lp.ID)
	c.add(n, "computeSlices", tp.ComputeSlices, lp.ComputeSlices)
	c.add(n, "memoryMiB", tp.MemoryMiB, lp.MemoryMiB)
	c.add(n, "multiprocessors", tp.Multiprocessors, lp.Multiprocessors)
	c.add(n, "copyEngines", tp.CopyEngines, lp.CopyEngines)
	c.add(n, "decoders", tp.Decoders, lp.Decoders)
	c.add(n, "encoders", tp.Encoders, lp.Encoders)
	c.add(n, "jpegEngines", tp.JpegEngines, lp.JpegEngines)
	c.add(n, "ofaEngines", tp.OfaEngines, lp.OfaEngines)
	c.add(n, "instanceCount", tp.InstanceCount, lp.InstanceCount)
	c.add(n, "placements", formatPlacements(tp.Placements), formatPlacements(lp.Placements))
	if len(lp.ComputeProfiles) == 0 {
		return
	}
	for _, tc := range tp.ComputeProfiles {
		var lc *ComputeProfile
		for i := range lp.ComputeProfiles {
			if lp.ComputeProfiles[i].Slices == tc.Slices {
				lc = &lp.ComputeProfiles[i]
				break
			}
		}
		cp := fmt.Sprintf("computeProfiles[%dc]", tc.Slices)
		if lc == nil {
			c.out = append(c.out, Difference{Field: fmt.Sprintf("profiles[%s].%s", n, cp), Model: c.model, Profile: n, Property: cp,
				Table: "present", Live: absent})
			continue
		}
		c.add(n, cp+".id", tc.ID, lc.ID)
		c.add(n, cp+".instanceCount", tc.InstanceCount, lc.InstanceCount)
		c.add(n, cp+".multiprocessors", tc.Multiprocessors, lc.Multiprocessors)
		if len(lc.Placements) > 0 {
			c.add(n, cp+".placements", tc.Placements, lc.Placements)
		}
	}
}

// formatPlacements writes placements as "0:4,4:4" (start:size, as nvidia-smi does).
func formatPlacements(ps []Placement) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%d:%d", p.Start, p.Size)
	}
	return strings.Join(parts, ",")
}
