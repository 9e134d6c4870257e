package nvmlgpu

import "github.com/NVIDIA/go-nvml/pkg/nvml"

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
