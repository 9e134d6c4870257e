package gputest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Default versions reported by every machine unless an option changes them.
const (
	// DefaultDriverVersion is the kernel driver version a machine reports (SystemGetDriverVersion).
	DefaultDriverVersion = "580.126.09"
	// DefaultCUDADriverVersion is the CUDA driver API version a machine reports
	// (SystemGetCudaDriverVersion): 13000 is CUDA 13.0.
	DefaultCUDADriverVersion = 13000
)

// gpuModel is what every GPU of one product answers, independent of its slot in a machine.
type gpuModel struct {
	productName    string // NVML GetName
	arch           nvml.DeviceArchitecture
	brand          nvml.BrandType
	ccMajor        int
	ccMinor        int
	memoryMiB      uint64
	multiprocessor int
	pciDeviceID    uint32
	pciSubsystemID uint32
	nvLinks        int  // NVLink links per GPU; 0 means no NVLink
	migCapable     bool // whether the product supports MIG at all
}

// Whole-GPU values. The MIG geometry of the MIG-capable products is not here: it comes from the
// mig package's catalog, the single source of MIG geometry in gpudra. Memory totals are what
// nvidia-smi reports as "Total" for the product; SM counts are the enabled SMs of the product.
var (
	modelA100SXM40 = gpuModel{
		productName: "NVIDIA A100-SXM4-40GB", arch: nvml.DEVICE_ARCH_AMPERE, brand: nvml.BRAND_NVIDIA,
		ccMajor: 8, ccMinor: 0, memoryMiB: 40960, multiprocessor: 108,
		pciDeviceID: 0x20B010DE, pciSubsystemID: 0x134F10DE, nvLinks: 12, migCapable: true,
	}
	modelA100SXM80 = gpuModel{
		productName: "NVIDIA A100-SXM4-80GB", arch: nvml.DEVICE_ARCH_AMPERE, brand: nvml.BRAND_NVIDIA,
		ccMajor: 8, ccMinor: 0, memoryMiB: 81920, multiprocessor: 108,
		pciDeviceID: 0x20B210DE, pciSubsystemID: 0x147F10DE, nvLinks: 12, migCapable: true,
	}
	modelH100SXM = gpuModel{
		productName: "NVIDIA H100 80GB HBM3", arch: nvml.DEVICE_ARCH_HOPPER, brand: nvml.BRAND_NVIDIA,
		ccMajor: 9, ccMinor: 0, memoryMiB: 81559, multiprocessor: 132,
		pciDeviceID: 0x233010DE, pciSubsystemID: 0x16C110DE, nvLinks: 18, migCapable: true,
	}
	modelH200SXM = gpuModel{
		productName: "NVIDIA H200", arch: nvml.DEVICE_ARCH_HOPPER, brand: nvml.BRAND_NVIDIA,
		ccMajor: 9, ccMinor: 0, memoryMiB: 143771, multiprocessor: 132,
		pciDeviceID: 0x233510DE, pciSubsystemID: 0x18B010DE, nvLinks: 18, migCapable: true,
	}
	modelB200 = gpuModel{
		productName: "NVIDIA B200", arch: nvml.DEVICE_ARCH_BLACKWELL, brand: nvml.BRAND_NVIDIA,
		ccMajor: 10, ccMinor: 0, memoryMiB: 183359, multiprocessor: 148,
		pciDeviceID: 0x290110DE, pciSubsystemID: 0x199910DE, nvLinks: 18, migCapable: true,
	}
	// The GB200's SM count is not published in a primary source we have; 152 is an estimate and
	// the mig catalog's value wins when it has one.
	modelGB200 = gpuModel{
		productName: "NVIDIA GB200", arch: nvml.DEVICE_ARCH_BLACKWELL, brand: nvml.BRAND_NVIDIA,
		ccMajor: 10, ccMinor: 0, memoryMiB: 189471, multiprocessor: 152,
		pciDeviceID: 0x294110DE, pciSubsystemID: 0x20D510DE, nvLinks: 18, migCapable: true,
	}
	// The A30 has third-generation NVLink for a bridge to one other A30: 200 GB/s, at 50 GB/s
	// per NVLink 3 link that is 4 links (NV4 in nvidia-smi topo -m); see topology/testdata.
	modelA30 = gpuModel{
		productName: "NVIDIA A30", arch: nvml.DEVICE_ARCH_AMPERE, brand: nvml.BRAND_NVIDIA,
		ccMajor: 8, ccMinor: 0, memoryMiB: 24576, multiprocessor: 56,
		pciDeviceID: 0x20B710DE, pciSubsystemID: 0x153210DE, nvLinks: 4, migCapable: true,
	}
	// RTX PRO 6000 Blackwell Server Edition: name, 97887 MiB and 188 SMs as nvidia-smi prints
	// them in the recordings (printouts/rtx-pro-6000*.txt). The brand and the PCI subsystem id
	// are not in a public source we have: NVIDIA RTX and 0 (unknown).
	modelRTXPro6000 = gpuModel{
		productName: "NVIDIA RTX PRO 6000 Blackwell Server Edition", arch: nvml.DEVICE_ARCH_BLACKWELL, brand: nvml.BRAND_NVIDIA_RTX,
		ccMajor: 12, ccMinor: 0, memoryMiB: 97887, multiprocessor: 188,
		pciDeviceID: 0x2BB510DE, migCapable: true,
	}
	modelL4 = gpuModel{
		productName: "NVIDIA L4", arch: nvml.DEVICE_ARCH_ADA, brand: nvml.BRAND_NVIDIA,
		ccMajor: 8, ccMinor: 9, memoryMiB: 23034, multiprocessor: 58,
		pciDeviceID: 0x27B810DE, pciSubsystemID: 0x16CA10DE,
	}
	modelA10G = gpuModel{
		productName: "NVIDIA A10G", arch: nvml.DEVICE_ARCH_AMPERE, brand: nvml.BRAND_NVIDIA,
		ccMajor: 8, ccMinor: 6, memoryMiB: 23028, multiprocessor: 72,
		pciDeviceID: 0x223710DE, pciSubsystemID: 0x152F10DE,
	}
)

// nvlinkKind says how the GPUs of a machine are connected by NVLink.
type nvlinkKind int

const (
	nvlinkNone   nvlinkKind = iota // PCIe only
	nvlinkSwitch                   // every GPU's links go to NVSwitches (DGX/HGX baseboards)
	nvlinkBridge                   // NVLink bridges join pairs of PCIe cards (machineSpec.bridges)
)

// slot is where one GPU sits in a machine.
type slot struct {
	busID      string // canonical lower-case "dddd:bb:dd.f"
	numa       int    // NUMA node, -1 if the machine has none
	pcieSwitch int    // PCIe switch group; GPUs with the same group share a switch
}

// machineSpec describes one fake machine.
type machineSpec struct {
	name        string
	description string
	model       gpuModel
	slots       []slot
	nvlink      nvlinkKind
	// switches are the PCI bus IDs of the NVSwitches for nvlinkSwitch machines; link l of every
	// GPU goes to switches[l*len(switches)/links].
	switches []string
	// bridges are the GPU pairs an NVLink bridge joins on nvlinkBridge machines: every link of
	// both GPUs goes to the other; a GPU in no pair has its links inactive.
	bridges [][2]int
	// switchLevel is the PCIe common ancestor of two GPUs behind the same PCIe switch group:
	// TOPOLOGY_SINGLE (PIX) for one switch, TOPOLOGY_MULTIPLE (PXB, the default) for a tree of
	// switches.
	switchLevel nvml.GpuTopologyLevel
	// fabric is true on machines whose GPUs report an NVLink fabric (clique) through
	// GetGpuFabricInfo.
	fabric bool
	// giIDAscending numbers GPU instances from the lowest placement up (see Device.giID), as
	// the product's recorded nvidia-smi -lgi output shows.
	giIDAscending bool
}

func dgxSlots(busIDs []string, numa []int, pairSwitch bool) []slot {
	s := make([]slot, len(busIDs))
	for i := range busIDs {
		sw := i
		if pairSwitch {
			sw = i / 2
		}
		s[i] = slot{busID: busIDs[i], numa: numa[i], pcieSwitch: sw}
	}
	return s
}

var (
	dgxA100Bus  = []string{"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0", "0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"}
	dgxA100NUMA = []int{3, 3, 1, 1, 7, 7, 5, 5}
	dgxA100Sw   = []string{"0000:c4:00.0", "0000:c5:00.0", "0000:c6:00.0", "0000:c7:00.0", "0000:c8:00.0", "0000:c9:00.0"}
	dgxHBus     = []string{"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"}
	dgxHNUMA    = []int{0, 0, 0, 0, 1, 1, 1, 1}
	dgxHSw      = []string{"0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"}
	dgxBSw      = []string{"0000:05:00.0", "0000:06:00.0"}
)

// nvlinkSwitchChips returns n made-up PCI bus IDs for NVLink switch chips outside the node (the
// switch trays of an NVL72 rack): NVML names the far end of every link, but those chips are on
// no PCIe bus of the node.
func nvlinkSwitchChips(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("0000:f0:%02x.0", i)
	}
	return out
}

// machineSpecs returns the fake machines, in the order Machines lists them. It builds a fresh
// table on each call so that no package-level state is mutable.
func machineSpecs() []machineSpec {
	return []machineSpec{
		{
			name: "dgx-a100-40gb", description: "NVIDIA DGX A100 with 8x A100-SXM4-40GB on NVSwitch",
			model: modelA100SXM40, slots: dgxSlots(dgxA100Bus, dgxA100NUMA, true),
			nvlink: nvlinkSwitch, switches: dgxA100Sw,
		},
		{
			name: "dgx-a100-80gb", description: "NVIDIA DGX A100 with 8x A100-SXM4-80GB on NVSwitch",
			model: modelA100SXM80, slots: dgxSlots(dgxA100Bus, dgxA100NUMA, true),
			nvlink: nvlinkSwitch, switches: dgxA100Sw,
		},
		{
			name: "dgx-h100", description: "NVIDIA DGX H100 with 8x H100 80GB HBM3 on NVSwitch",
			model: modelH100SXM, slots: dgxSlots(dgxHBus, dgxHNUMA, false),
			nvlink: nvlinkSwitch, switches: dgxHSw,
		},
		{
			name: "dgx-h200", description: "NVIDIA DGX H200 with 8x H200 141GB on NVSwitch",
			model: modelH200SXM, slots: dgxSlots(dgxHBus, dgxHNUMA, false),
			nvlink: nvlinkSwitch, switches: dgxHSw,
		},
		{
			name: "dgx-b200", description: "NVIDIA DGX B200 with 8x B200 on NVSwitch",
			model: modelB200, slots: dgxSlots(dgxHBus, dgxHNUMA, false),
			nvlink: nvlinkSwitch, switches: dgxBSw,
		},
		{
			name: "a30x4", description: "PCIe server with 4x A30, two per CPU socket, NVLink bridges joining GPUs 0-1 and 2-3",
			model:  modelA30,
			slots:  dgxSlots([]string{"0000:17:00.0", "0000:65:00.0", "0000:ca:00.0", "0000:e3:00.0"}, []int{0, 0, 1, 1}, false),
			nvlink: nvlinkBridge, bridges: [][2]int{{0, 1}, {2, 3}},
		},
		{
			name: "l4x8", description: "PCIe server with 8x L4 (Ada, no MIG, no NVLink), four per CPU socket, pairs behind one PCIe switch each",
			model: modelL4,
			slots: dgxSlots([]string{"0000:38:00.0", "0000:3a:00.0", "0000:3c:00.0", "0000:3e:00.0", "0000:b8:00.0", "0000:ba:00.0", "0000:bc:00.0", "0000:be:00.0"},
				[]int{0, 0, 0, 0, 1, 1, 1, 1}, true),
			switchLevel: nvml.TOPOLOGY_SINGLE,
		},
		{
			name: "a10gx4", description: "cloud VM with 4x A10G (Ampere CC 8.6, no MIG) on one host bridge",
			model: modelA10G,
			slots: []slot{
				{busID: "0000:00:1b.0", numa: 0, pcieSwitch: -1},
				{busID: "0000:00:1c.0", numa: 0, pcieSwitch: -1},
				{busID: "0000:00:1d.0", numa: 0, pcieSwitch: -1},
				{busID: "0000:00:1e.0", numa: 0, pcieSwitch: -1},
			},
		},
		{
			// Placements, profiles and GPU instance ids as recorded on an RTX PRO 6000 Blackwell
			// Server Edition node (printouts/rtx-pro-6000.txt); the PCIe layout is invented.
			name: "rtx-pro-6000x4", description: "PCIe server with 4x RTX PRO 6000 Blackwell Server Edition, two per CPU socket, no NVLink",
			model:         modelRTXPro6000,
			slots:         dgxSlots([]string{"0000:01:00.0", "0000:21:00.0", "0000:81:00.0", "0000:a1:00.0"}, []int{0, 0, 1, 1}, false),
			giIDAscending: true,
		},
		{
			// A compute tray of an NVL72 rack: each GPU has one NVLink to each of the rack's 18
			// NVLink switch chips, so every pair shows NV18, as recorded GB200 nodes do.
			name: "gb200-nvl4", description: "GB200 board: 2 Grace CPUs, 4 GB200 GPUs on the rack's NVLink switches, in one NVLink domain (clique)",
			model:  modelGB200,
			slots:  dgxSlots([]string{"0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"}, []int{0, 0, 1, 1}, false),
			nvlink: nvlinkSwitch, switches: nvlinkSwitchChips(18), fabric: true,
		},
	}
}

// Machines returns the names of the fake machines New accepts, in a fixed order.
func Machines() []string {
	specs := machineSpecs()
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.name
	}
	return names
}

// Describe returns a one-line description of the named machine, for CLIs.
func Describe(name string) (string, error) {
	s, err := lookupSpec(name)
	if err != nil {
		return "", err
	}
	return s.description, nil
}

func lookupSpec(name string) (machineSpec, error) {
	specs := machineSpecs()
	for _, s := range specs {
		if s.name == name {
			return s, nil
		}
	}
	names := Machines()
	slices.Sort(names)
	return machineSpec{}, fmt.Errorf("gputest: unknown machine %q; valid machines: %s", name, strings.Join(names, ", "))
}
