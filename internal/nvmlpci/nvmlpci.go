package nvmlpci

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/pciaddr"
)

// BusID is the GPU's canonical PCI address: NVML's bus ID string (or its legacy one), else the
// address its domain, bus and device numbers spell (GPUs are function 0); "" when NVML gives
// neither (0000:00:00.0, what an empty PciInfo spells, is a host bridge, never a GPU).
func BusID(pci nvml.PciInfo) string {
	for _, s := range []string{cString(pci.BusId[:]), cString(pci.BusIdLegacy[:])} {
		if id, err := pciaddr.Canonical(s); err == nil {
			return id
		}
	}
	if pci.Domain == 0 && pci.Bus == 0 && pci.Device == 0 {
		return ""
	}
	return fmt.Sprintf("%04x:%02x:%02x.0", pci.Domain, pci.Bus, pci.Device)
}

// cString is a NUL-terminated C string of NVML's.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
