package pciaddr

import (
	"fmt"
	"strings"
)

// Canonical returns a PCI address in the canonical lower-case "dddd:bb:dd.f" form from any of
// NVML's and sysfs's spellings ("00000000:07:00.0", "0000:07:00.0", upper or lower case). The
// domain may be wider than four hex digits (NVML's is 32 bits; Linux gives VMD domains five
// digits) and is then printed whole.
func Canonical(s string) (string, error) {
	var dom, bus, dev, fn uint64
	if n, err := fmt.Sscanf(strings.TrimSpace(s), "%x:%x:%x.%x", &dom, &bus, &dev, &fn); err != nil || n != 4 {
		return "", fmt.Errorf("PCI bus ID %q is not of the form DOMAIN:BUS:DEVICE.FUNCTION", s)
	}
	if dom > 0xffffffff || bus > 0xff || dev > 0x1f || fn > 7 {
		return "", fmt.Errorf("PCI bus ID %q is out of range", s)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", dom, bus, dev, fn), nil
}
