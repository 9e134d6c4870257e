package nvmlgpu

import (
	"context"
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/mig"
)

// TestEnumeratePCIBusIDs (issue 28, defect 5): a GPU whose PCI address NVML does not give has
// none, rather than the 0000:00:00.0 an empty PciInfo spells; an address two GPUs report
// identifies neither and is dropped from both.
func TestEnumeratePCIBusIDs(t *testing.T) {
	info := func(busID string, domain, bus, device uint32) nvml.PciInfo {
		p := nvml.PciInfo{Domain: domain, Bus: bus, Device: device}
		for i, c := range busID {
			p.BusId[i] = int8(c)
		}
		return p
	}
	legacy := func(busID string) nvml.PciInfo {
		var p nvml.PciInfo
		for i, c := range busID {
			p.BusIdLegacy[i] = int8(c)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		// pci is what each of the four GPUs of an a30x4 reports.
		pci  [4]nvml.PciInfo
		want []string
	}{
		{"strings", [4]nvml.PciInfo{info("00000000:17:00.0", 0, 0x17, 0), info("00000000:65:00.0", 0, 0x65, 0), info("00000000:CA:00.0", 0, 0xca, 0), info("00000000:E3:00.0", 0, 0xe3, 0)},
			[]string{"0000:17:00.0", "0000:65:00.0", "0000:ca:00.0", "0000:e3:00.0"}},
		{"numbers only", [4]nvml.PciInfo{info("", 0, 0x17, 0), info("", 1, 0x65, 2), info("", 0, 0xca, 0), info("", 0, 0xe3, 0)},
			[]string{"0000:17:00.0", "0001:65:02.0", "0000:ca:00.0", "0000:e3:00.0"}},
		{"nothing", [4]nvml.PciInfo{}, []string{"", "", "", ""}},
		{"legacy strings", [4]nvml.PciInfo{legacy("0000:17:00.0"), legacy("0000:65:00.0"), legacy("0000:CA:00.0"), legacy("0000:E3:00.0")},
			[]string{"0000:17:00.0", "0000:65:00.0", "0000:ca:00.0", "0000:e3:00.0"}},
		{"one GPU without", [4]nvml.PciInfo{info("00000000:17:00.0", 0, 0x17, 0), info("00000000:65:00.0", 0, 0x65, 0), {}, info("00000000:E3:00.0", 0, 0xe3, 0)},
			[]string{"0000:17:00.0", "0000:65:00.0", "", "0000:e3:00.0"}},
		{"two GPUs share one", [4]nvml.PciInfo{info("00000000:17:00.0", 0, 0x17, 0), info("00000000:17:00.0", 0, 0x17, 0), info("", 0, 0xca, 0), info("garbage", 0, 0xe3, 0)},
			[]string{"", "", "0000:ca:00.0", "0000:e3:00.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, "a30x4")
			for i, p := range tc.pci {
				m.Device(i).GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return p, nvml.SUCCESS }
			}
			inv, err := Enumerate(context.Background(), m)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, g := range inv.GPUs {
				got = append(got, g.PCIBusID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PCI bus IDs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEnumerateMIGNamesWithoutGPUMemory: on a GPU that reports no dedicated memory and that
// the catalog does not know, MIG devices are named by mig.ProfileName from their own memory in
// GiB (1g.5gb is 4864 MiB, 3g.20gb 19968 MiB on an A100-40GB), not "1g.0gb".
func TestEnumerateMIGNamesWithoutGPUMemory(t *testing.T) {
	m := newMachine(t, "dgx-a100-40gb", gputest.WithMIG(0, "1g.5gb@0", "3g.20gb@4"),
		gputest.WithFaultAfter("GetMemoryInfo", 0, nvml.ERROR_NOT_SUPPORTED))
	unknown := func(string) (*mig.Model, error) { return nil, errors.New("unknown") }
	inv, err := Enumerate(context.Background(), m, WithCatalog(unknown))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range inv.GPUs[0].MIGDevices {
		got = append(got, d.Profile)
	}
	if diff := cmp.Diff([]string{"1g.5gb", "3g.20gb"}, got); diff != "" {
		t.Errorf("MIG device profiles (-want +got):\n%s", diff)
	}
}

// TestEnumerateOptionalAttributes (issue 28, defect 1): a call for an optional attribute that
// the GPU does not support leaves the attribute out and the GPU is served; a call for what a
// GPU cannot be served without fails the GPU, named by the call.
func TestEnumerateOptionalAttributes(t *testing.T) {
	for _, tc := range []struct {
		method string
		// check says whether the attribute was left out; nil: the call is required.
		check func(g gpu.GPU) bool
	}{
		{"GetBrand", func(g gpu.GPU) bool { return g.Brand == "" }},
		{"GetArchitecture", func(g gpu.GPU) bool { return g.Architecture == "" }},
		{"GetMemoryInfo", func(g gpu.GPU) bool { return g.MemoryBytes == 0 }},
		{"GetPciInfo", func(g gpu.GPU) bool { return g.PCIBusID == "" && g.PCIDeviceID == 0 }},
		{"GetNumaNodeId", func(g gpu.GPU) bool { return g.NUMANode == -1 }},
		{"GetUUID", nil},
		{"GetMinorNumber", nil},
		{"GetName", nil},
		{"GetCudaComputeCapability", nil},
	} {
		for _, ret := range []nvml.Return{nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND} {
			t.Run(tc.method+"/"+ret.String(), func(t *testing.T) {
				m := newMachine(t, "l4x8", gputest.WithFaultAfter("Device."+tc.method, 0, ret))
				inv, err := Enumerate(context.Background(), m, SkipFailedGPUs(true))
				if err != nil {
					t.Fatal(err)
				}
				if tc.check == nil {
					if len(inv.GPUs) != 0 || len(inv.Errors) != 8 || inv.Errors[0].Op != tc.method {
						t.Errorf("%d GPUs, errors %v; want every GPU failed by %s", len(inv.GPUs), inv.Errors, tc.method)
					}
					return
				}
				if len(inv.GPUs) != 8 || len(inv.Errors) != 0 {
					t.Fatalf("%d GPUs, errors %v; want all 8 served", len(inv.GPUs), inv.Errors)
				}
				for _, g := range inv.GPUs {
					if !tc.check(g) {
						t.Errorf("GPU %d: %+v; want the attribute left out", g.Index, g)
					}
				}
			})
		}
	}
}
