package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/internal/pciaddr"
)

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
// from any of NVML's spellings ("00000000:07:00.0", "0000:07:00.0", upper or lower case). A
// domain wider than four hex digits (NVML's is 32 bits) is printed whole.
func CanonicalPCIBusID(s string) (string, error) { return pciaddr.Canonical(s) }
