package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

// BrandName returns the product brand as nvidia-smi spells it ("NVIDIA", "Tesla", "GeForce", …),
// or "Unknown".
func BrandName(b nvml.BrandType) string {
	switch b {
	case nvml.BRAND_QUADRO:
		return "Quadro"
	case nvml.BRAND_TESLA:
		return "Tesla"
	case nvml.BRAND_NVS:
		return "NVS"
	case nvml.BRAND_GRID:
		return "Grid"
	case nvml.BRAND_GEFORCE:
		return "GeForce"
	case nvml.BRAND_TITAN:
		return "Titan"
	case nvml.BRAND_NVIDIA_VAPPS:
		return "NVIDIA Virtual Applications"
	case nvml.BRAND_NVIDIA_VPC:
		return "NVIDIA Virtual PC"
	case nvml.BRAND_NVIDIA_VCS:
		return "NVIDIA Virtual Compute Server"
	case nvml.BRAND_NVIDIA_VWS:
		return "NVIDIA RTX Virtual Workstation"
	case nvml.BRAND_NVIDIA_CLOUD_GAMING:
		return "NVIDIA Cloud Gaming"
	case nvml.BRAND_QUADRO_RTX:
		return "Quadro RTX"
	case nvml.BRAND_NVIDIA_RTX:
		return "NVIDIA RTX"
	case nvml.BRAND_NVIDIA:
		return "NVIDIA"
	case nvml.BRAND_GEFORCE_RTX:
		return "GeForce RTX"
	case nvml.BRAND_TITAN_RTX:
		return "Titan RTX"
	}
	return "Unknown"
}

// ArchitectureName returns the architecture name as NVIDIA's tools spell it (see
// nvmlmig.ArchitectureName): Kepler … Ampere, "Ada Lovelace", Hopper, Blackwell, Rubin, or "Unknown".
func ArchitectureName(a nvml.DeviceArchitecture) string { return nvmlmig.ArchitectureName(a) }

// NormalizeDriverVersion turns an NVIDIA driver version into a semantic version: leading zeros
// dropped and missing parts filled with 0 ("580.126.09" → "580.126.9", "550.54" → "550.54.0").
func NormalizeDriverVersion(v string) (string, error) {
	parts := strings.Split(strings.TrimSpace(v), ".")
	if len(parts) == 0 || len(parts) > 3 || parts[0] == "" {
		return "", fmt.Errorf("driver version %q is not of the form MAJOR.MINOR[.PATCH]", v)
	}
	nums := [3]uint64{}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return "", fmt.Errorf("driver version %q: part %q is not a number", v, p)
		}
		nums[i] = n
	}
	return fmt.Sprintf("%d.%d.%d", nums[0], nums[1], nums[2]), nil
}

// CUDADriverVersion turns NVML's CUDA driver version (1000*major + 10*minor) into a semantic
// version: 13000 → "13.0.0", 12040 → "12.4.0".
func CUDADriverVersion(v int) (string, error) {
	if v <= 0 {
		return "", fmt.Errorf("CUDA driver version %d is not positive", v)
	}
	return fmt.Sprintf("%d.%d.0", v/1000, v%1000/10), nil
}

// CanonicalPCIBusID returns a PCI address in the canonical lower-case "dddd:bb:dd.f" form
// from any of NVML's spellings ("00000000:07:00.0", "0000:07:00.0", upper or lower case).
func CanonicalPCIBusID(s string) (string, error) {
	var dom, bus, dev, fn uint64
	if n, err := fmt.Sscanf(strings.TrimSpace(s), "%x:%x:%x.%x", &dom, &bus, &dev, &fn); err != nil || n != 4 {
		return "", fmt.Errorf("PCI bus ID %q is not of the form DOMAIN:BUS:DEVICE.FUNCTION", s)
	}
	if dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7 {
		return "", fmt.Errorf("PCI bus ID %q is out of range", s)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", dom, bus, dev, fn), nil
}
