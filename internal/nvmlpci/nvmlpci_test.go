package nvmlpci

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func cBytes(s string) [32]int8 {
	var b [32]int8
	for i, c := range []byte(s) {
		b[i] = int8(c)
	}
	return b
}

func legacy(s string) [16]int8 {
	var b [16]int8
	for i, c := range []byte(s) {
		b[i] = int8(c)
	}
	return b
}

// TestBusID: the bus ID string wins, then the legacy one, then the numbers; an empty PciInfo
// has no address, and a string NVML garbles falls through to the next source.
func TestBusID(t *testing.T) {
	for name, tc := range map[string]struct {
		pci  nvml.PciInfo
		want string
	}{
		"bus id":               {nvml.PciInfo{BusId: cBytes("00000000:B7:00.0"), Bus: 1}, "0000:b7:00.0"},
		"legacy":               {nvml.PciInfo{BusIdLegacy: legacy("0000:07:00.0")}, "0000:07:00.0"},
		"garbled string":       {nvml.PciInfo{BusId: cBytes("not an address"), Domain: 0, Bus: 0x41, Device: 2}, "0000:41:02.0"},
		"numbers only":         {nvml.PciInfo{Domain: 0x10000, Bus: 0xe1}, "10000:e1:00.0"},
		"empty":                {nvml.PciInfo{}, ""},
		"garbled, then legacy": {nvml.PciInfo{BusId: cBytes("0000:zz:00.0"), BusIdLegacy: legacy("0000:07:00.0"), Bus: 9}, "0000:07:00.0"},
	} {
		if got := BusID(tc.pci); got != tc.want {
			t.Errorf("%s: BusID = %q, want %q", name, got, tc.want)
		}
	}
}
