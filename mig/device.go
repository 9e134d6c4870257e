package mig

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ArchitectureName is the architecture name of an NVML DEVICE_ARCH_* value as NVIDIA's tools
// spell it (the "architecture" attribute manifests select on): Kepler, Maxwell, Pascal, Volta,
// Turing, Ampere, "Ada Lovelace", Hopper, Blackwell, Rubin, or "Unknown".
func ArchitectureName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_KEPLER:
		return "Kepler"
	case nvml.DEVICE_ARCH_MAXWELL:
		return "Maxwell"
	case nvml.DEVICE_ARCH_PASCAL:
		return "Pascal"
	case nvml.DEVICE_ARCH_VOLTA:
		return "Volta"
	case nvml.DEVICE_ARCH_TURING:
		return "Turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "Ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "Ada Lovelace"
	case nvml.DEVICE_ARCH_HOPPER:
		return "Hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "Blackwell"
	case nvml.DEVICE_ARCH_RUBIN:
		return "Rubin"
	}
	return "Unknown"
}

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
// the one formula for profiles the catalog does not name: the device model (ModelFromDevice),
// the dynamic partitions built from it and the existing MIG devices gpu.Enumerate names all
// use it, so a placement has the same name in static and dynamic mode. Two profiles it names
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

// ModelFromDevice builds a Model from a live GPU: it asks NVML for every GPU-instance profile enum
// (GetGpuInstanceProfileInfo until ERROR_INVALID_ARGUMENT, skipping ERROR_NOT_SUPPORTED), the
// possible placements of each, and — where a GPU instance of the profile already exists — its
// compute-instance profiles and placements (NVML can only list those through a GPU-instance handle,
// so ComputeProfiles is empty for profiles with no instance). Profile names are derived with
// ProfileName. Multiprocessors is left 0: NVML reports SM counts only for MIG device handles.
// Name and ProductNames are the product name without the "NVIDIA " prefix. Compare reports where
// the result disagrees with the catalog.
func ModelFromDevice(dev nvml.Device) (*Model, error) {
	if dev == nil {
		return nil, errNilDevice("ModelFromDevice")
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get GPU name: %w", ret)
	}
	short := strings.TrimPrefix(name, "NVIDIA ")
	m := &Model{Name: short, ProductNames: []string{short}}
	if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		m.PCIDeviceIDs = []uint32{pci.PciDeviceId}
	} else if ret != nvml.ERROR_NOT_SUPPORTED {
		return nil, fmt.Errorf("get PCI info of GPU %s: %w", short, ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get memory info of GPU %s: %w", short, ret)
	}
	m.MemoryMiB = mem.Total >> 20
	if major, minor, ret := dev.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		m.CudaComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	} else if ret != nvml.ERROR_NOT_SUPPORTED {
		return nil, fmt.Errorf("get compute capability of GPU %s: %w", short, ret)
	}
	if arch, ret := dev.GetArchitecture(); ret == nvml.SUCCESS {
		m.Architecture = ArchitectureName(arch)
	} else if ret != nvml.ERROR_NOT_SUPPORTED {
		return nil, fmt.Errorf("get architecture of GPU %s: %w", short, ret)
	}

	for enum := 0; ; enum++ {
		info, ret := dev.GetGpuInstanceProfileInfo(enum)
		if ret == nvml.ERROR_INVALID_ARGUMENT {
			break
		}
		if ret == nvml.ERROR_NOT_SUPPORTED {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get GPU instance profile info for enum %d on GPU %s: %w", enum, short, ret)
		}
		p := GIProfile{
			Sources:         allSources(SourceDevice),
			Name:            ProfileName(enum, int(info.SliceCount), info.MemorySizeMB, m.MemoryMiB),
			Enum:            enum,
			ID:              int(info.Id),
			ComputeSlices:   int(info.SliceCount),
			MemoryMiB:       info.MemorySizeMB,
			Multiprocessors: int(info.MultiprocessorCount),
			CopyEngines:     int(info.CopyEngineCount),
			Decoders:        int(info.DecoderCount),
			Encoders:        int(info.EncoderCount),
			JpegEngines:     int(info.JpegCount),
			OfaEngines:      int(info.OfaCount),
			InstanceCount:   int(info.InstanceCount),
		}
		placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get possible placements of profile %s (id %d) on GPU %s: %w", p.Name, p.ID, short, ret)
		}
		for _, pl := range placements {
			p.Placements = append(p.Placements, Placement{Start: int(pl.Start), Size: int(pl.Size)})
			m.MemorySlices = max(m.MemorySlices, int(pl.Start+pl.Size))
		}
		m.ComputeSlices = max(m.ComputeSlices, p.ComputeSlices)
		cps, err := liveComputeProfiles(dev, &info)
		if err != nil {
			return nil, fmt.Errorf("profile %s on GPU %s: %w", p.Name, short, err)
		}
		p.ComputeProfiles = cps
		m.Profiles = append(m.Profiles, p)
		if enum > 4*giEnumCount { // guard against a device that never says INVALID_ARGUMENT
			break
		}
	}
	DisambiguateProfileNames(m.Profiles)
	return m, nil
}

// DeviceModel returns the MIG model a driver should use for a live GPU, and how the built-in
// catalog differs from it. The model is what NVML reports (ModelFromDevice): profile info and
// possible placements of every GPU-instance profile the GPU supports, "+me", "-me", "+me.all" and
// "+gfx" variants included, whatever the catalog says, so a GPU the catalog does not know or a
// driver release that changed memory sizes just works. Compute-instance profiles, which NVML lists
// only through an existing GPU instance, come from the catalog profile with the same enum, or are
// derived from the GPU-instance profile when the catalog lacks it (inferred). When the catalog
// knows the GPU, the model keeps the catalog's name, product names, PCI ids and SM count. The
// differences are Compare(catalog, live), meant to be logged once and counted; a GPU the catalog
// does not know gives a single "model" difference.
func DeviceModel(dev nvml.Device) (*Model, []Difference, error) {
	if dev == nil {
		return nil, nil, fmt.Errorf("device model: nil nvml.Device")
	}
	live, err := ModelFromDevice(dev)
	if err != nil {
		return nil, nil, err
	}
	table, err := Lookup(live.Name)
	if err != nil {
		fillComputeProfiles(live, nil)
		return live, []Difference{{Field: "model", Model: live.Name, Property: "model", Table: absent, Live: live.Name}}, nil
	}
	diffs := Compare(table, live)
	fillComputeProfiles(live, table)
	live.Name, live.ProductNames, live.PCIDeviceIDs = table.Name, table.ProductNames, table.PCIDeviceIDs
	live.Multiprocessors = table.Multiprocessors
	return live, diffs, nil
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

// liveComputeProfiles lists the compute-instance profiles of the first existing GPU instance of a
// profile, or nil when there is none.
func liveComputeProfiles(dev nvml.Device, info *nvml.GpuInstanceProfileInfo) ([]ComputeProfile, error) {
	gis, ret := dev.GetGpuInstances(info)
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return nil, nil // MIG mode is off: no GPU instances to ask
	}
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("list GPU instances: %w", ret)
	}
	if len(gis) == 0 {
		return nil, nil
	}
	var out []ComputeProfile
	for ciEnum := 0; ciEnum <= ciEnum6Slice; ciEnum++ {
		ci, ret := gis[0].GetComputeInstanceProfileInfo(ciEnum, 0)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get compute instance profile info for enum %d: %w", ciEnum, ret)
		}
		cp := ComputeProfile{
			Enum: ciEnum, ID: int(ci.Id), Slices: int(ci.SliceCount),
			InstanceCount: int(ci.InstanceCount), Multiprocessors: int(ci.MultiprocessorCount),
		}
		pls, ret := gis[0].GetComputeInstancePossiblePlacements(&ci)
		if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
			return nil, fmt.Errorf("get compute instance placements for enum %d: %w", ciEnum, ret)
		}
		for _, pl := range pls {
			cp.Placements = append(cp.Placements, int(pl.Start))
		}
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b ComputeProfile) int { return a.Slices - b.Slices })
	return out, nil
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

// Compare reports where a catalog model and a model read from hardware (ModelFromDevice) disagree,
// as data: one Difference per field, with the model, profile and property named so that a driver
// can log them once and count them in a metric. Profiles are matched by NVML enum. Values the live
// model does not know (zero Multiprocessors, empty Architecture or compute capability, no compute
// profiles) are not compared. The result is empty when they agree; a nil model gives a single
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
