package nvmlmig

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/mig"
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

// ModelFromDevice builds a mig.Model from a live GPU: it asks NVML for every GPU-instance profile
// enum (GetGpuInstanceProfileInfo until ERROR_INVALID_ARGUMENT, skipping ERROR_NOT_SUPPORTED), the
// possible placements of each, and — where a GPU instance of the profile already exists — its
// compute-instance profiles and placements (NVML can only list those through a GPU-instance
// handle, so ComputeProfiles is empty for profiles with no instance). Profile names are derived
// with mig.ProfileName. Multiprocessors is left 0: NVML reports SM counts only for MIG device
// handles. Name and ProductNames are the product name without the "NVIDIA " prefix. mig.Compare
// reports where the result disagrees with the catalog; DeviceModel completes it from the catalog.
func ModelFromDevice(dev nvml.Device) (*mig.Model, error) {
	if dev == nil {
		return nil, errNilDevice("ModelFromDevice")
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get GPU name: %w", ret)
	}
	short := strings.TrimPrefix(name, "NVIDIA ")
	m := &mig.Model{Name: short, ProductNames: []string{short}}
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
		p := mig.GIProfile{
			Sources:         deviceSources,
			Name:            mig.ProfileName(enum, int(info.SliceCount), info.MemorySizeMB, m.MemoryMiB),
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
			p.Placements = append(p.Placements, mig.Placement{Start: int(pl.Start), Size: int(pl.Size)})
			m.MemorySlices = max(m.MemorySlices, int(pl.Start+pl.Size))
		}
		m.ComputeSlices = max(m.ComputeSlices, p.ComputeSlices)
		cps, err := liveComputeProfiles(dev, &info)
		if err != nil {
			return nil, fmt.Errorf("profile %s on GPU %s: %w", p.Name, short, err)
		}
		p.ComputeProfiles = cps
		m.Profiles = append(m.Profiles, p)
		if enum > 4*nvml.GPU_INSTANCE_PROFILE_COUNT { // a device that never says INVALID_ARGUMENT
			break
		}
	}
	mig.DisambiguateProfileNames(m.Profiles)
	return m, nil
}

// DeviceModel returns the MIG model a driver should use for a live GPU, and how the built-in
// catalog differs from it: ModelFromDevice, completed by mig.MergeCatalog. The model is what
// NVML reports, every GPU-instance profile the GPU supports with its placements, so a GPU the
// catalog does not know or a driver release that changed memory sizes just works; compute-instance
// profiles and, for a GPU the catalog knows, its name, product names, PCI ids and SM count come
// from the catalog. The differences are meant to be logged once and counted; a GPU the catalog
// does not know gives a single "model" difference.
func DeviceModel(dev nvml.Device) (*mig.Model, []mig.Difference, error) {
	if dev == nil {
		return nil, nil, errNilDevice("DeviceModel")
	}
	live, err := ModelFromDevice(dev)
	if err != nil {
		return nil, nil, err
	}
	return live, mig.MergeCatalog(live), nil
}

// liveComputeProfiles lists the compute-instance profiles of the first existing GPU instance of a
// profile, or nil when there is none.
func liveComputeProfiles(dev nvml.Device, info *nvml.GpuInstanceProfileInfo) ([]mig.ComputeProfile, error) {
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
	var out []mig.ComputeProfile
	for ciEnum := 0; ciEnum <= nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE; ciEnum++ {
		ci, ret := gis[0].GetComputeInstanceProfileInfo(ciEnum, 0)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get compute instance profile info for enum %d: %w", ciEnum, ret)
		}
		cp := mig.ComputeProfile{
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
	slices.SortFunc(out, func(a, b mig.ComputeProfile) int { return a.Slices - b.Slices })
	return out, nil
}

// deviceSources says every value of a profile was read from the GPU.
var deviceSources = mig.ProfileSources{
	ID: mig.SourceDevice, Memory: mig.SourceDevice, Multiprocessors: mig.SourceDevice, CopyEngines: mig.SourceDevice,
	MediaEngines: mig.SourceDevice, InstanceCount: mig.SourceDevice, Placements: mig.SourceDevice,
}

// errNilDevice is the error of a function given a nil nvml.Device.
func errNilDevice(fn string) error {
	return fmt.Errorf("nvmlmig: %s: nil nvml.Device", fn)
}
