package gputest

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/uuid"

	"github.com/gpudra/gpudra/mig"
)

// Device is one physical GPU of a Machine. It implements nvml.Device on go-nvml's mock.Device;
// its func fields may be replaced after New to change one method of one GPU.
type Device struct {
	mock.Device

	m     *Machine
	index int
	slot  slot
	model gpuModel
	uuid  string
	// geometry is the MIG geometry of the product (machineGeometry); nil when the product has no
	// MIG or the catalog does not know it. Each device has its own copy.
	geometry    *mig.Model
	migMode     int
	computeMode nvml.ComputeMode
	lost        bool
	gis         map[uint32]*GpuInstance
	// fabric is what GetGpuFabricInfo reports when WithFabric, WithGPUFabric or SetFabric set
	// it; nil means the machine's default (defaultFabric).
	fabric *nvml.GpuFabricInfo
	// generation is bumped on every MIG device creation and feeds MIG UUIDs.
	generation uint64
	// loaded identifies the state file (WithStateDir) the state was last read from or written
	// to; another process's change shows as a different file.
	loaded fileID
}

var _ nvml.Device = (*Device)(nil)

func newDevice(m *Machine, i int, geometry *mig.Model) (*Device, error) {
	d := &Device{
		m:     m,
		index: i,
		slot:  m.spec.slots[i],
		model: m.spec.model,
		uuid:  gpuUUID(m.spec.name, i),
		gis:   map[uint32]*GpuInstance{},
	}
	if geometry != nil {
		d.geometry = geometry.Clone()
	}
	d.setFuncs()
	fillDefaults(m, &d.Device, "Device", func() bool { return d.lost })
	return d, nil
}

// multiprocessors is the SM count of the whole GPU: the catalog's when it has one.
func (d *Device) multiprocessors() int {
	if d.geometry != nil && d.geometry.Multiprocessors > 0 {
		return d.geometry.Multiprocessors
	}
	return d.model.multiprocessor
}

// coresPerSM is the number of CUDA cores of one SM for a compute capability.
func coresPerSM(major, minor int) int {
	switch {
	case major == 8 && minor == 0, major == 7, major == 6 && minor == 0:
		return 64
	case major == 3:
		return 192
	default:
		return 128
	}
}

// enter counts a call on this GPU and returns the injected fault or ERROR_GPU_IS_LOST.
// The caller holds m.mu.
func (d *Device) enter(method string) nvml.Return {
	if ret := d.m.enter("Device", method); ret != nvml.SUCCESS {
		return ret
	}
	d.sync()
	if d.lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	return nvml.SUCCESS
}

// peer returns the machine's physical device behind other, or nil.
func (d *Device) peer(other nvml.Device) *Device {
	o, ok := other.(*Device)
	if !ok || o.m != d.m {
		return nil
	}
	return o
}

func pciInfo(busID string, deviceID, subsystemID uint32) nvml.PciInfo {
	n, _ := parseBusID(busID)
	p := nvml.PciInfo{
		Domain:         uint32(n[0]),
		Bus:            uint32(n[1]),
		Device:         uint32(n[2]),
		PciDeviceId:    deviceID,
		PciSubSystemId: subsystemID,
	}
	putCString(p.BusIdLegacy[:], fmt.Sprintf("%04x:%02x:%02x.%x", n[0], n[1], n[2], n[3]))
	putCString(p.BusId[:], strings.ToUpper(fmt.Sprintf("%08x:%02x:%02x.%x", n[0], n[1], n[2], n[3])))
	return p
}

func putCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

// topologyLevel is the PCIe common ancestor of two GPUs.
func (d *Device) topologyLevel(o *Device) nvml.GpuTopologyLevel {
	switch {
	case d == o:
		return nvml.TOPOLOGY_INTERNAL
	case d.slot.pcieSwitch >= 0 && d.slot.pcieSwitch == o.slot.pcieSwitch:
		if d.m.spec.switchLevel != 0 {
			return d.m.spec.switchLevel
		}
		return nvml.TOPOLOGY_MULTIPLE
	case d.slot.pcieSwitch < 0 && d.slot.numa == o.slot.numa:
		return nvml.TOPOLOGY_HOSTBRIDGE
	case d.slot.numa == o.slot.numa:
		return nvml.TOPOLOGY_NODE
	default:
		return nvml.TOPOLOGY_SYSTEM
	}
}

// nvlinkRemote returns the remote end of link l: a switch's bus ID or a peer GPU.
func (d *Device) nvlinkRemote(l int) (busID string, peer *Device) {
	links := d.model.nvLinks
	switch d.m.spec.nvlink {
	case nvlinkSwitch:
		sw := d.m.spec.switches
		return sw[l*len(sw)/links], nil
	case nvlinkBridge:
		if p := d.bridgePartner(); p != nil {
			return p.slot.busID, p
		}
	}
	return "", nil
}

// bridgePartner returns the GPU an NVLink bridge joins d to, or nil.
func (d *Device) bridgePartner() *Device {
	if d.m.spec.nvlink != nvlinkBridge {
		return nil
	}
	for _, b := range d.m.spec.bridges {
		switch d.index {
		case b[0]:
			return d.m.devices[b[1]]
		case b[1]:
			return d.m.devices[b[0]]
		}
	}
	return nil
}

// nvlinked reports whether d and o reach each other over NVLink.
func (d *Device) nvlinked(o *Device) bool {
	switch d.m.spec.nvlink {
	case nvlinkSwitch:
		return d.model.nvLinks > 0
	case nvlinkBridge:
		return d.bridgePartner() == o
	}
	return false
}

const switchPCIDeviceID = 0x22A310DE // NVSwitch (third generation) PCI device id

// gate lets a call on the GPU through unless a fault is injected for it or the GPU is lost.
func (d *Device) gate() gate { return gate{mu: &d.m.mu, enter: d.enter} }

func (d *Device) setFuncs() {
	g := d.gate()
	d.GetIndexFunc = get(g, "GetIndex", func() int { return d.index })
	d.GetMinorNumberFunc = get(g, "GetMinorNumber", func() int { return d.index })
	d.GetUUIDFunc = get(g, "GetUUID", func() string { return d.uuid })
	d.GetNameFunc = get(g, "GetName", func() string { return d.model.productName })
	d.GetSerialFunc = get(g, "GetSerial", d.serial)
	d.GetBrandFunc = get(g, "GetBrand", func() nvml.BrandType { return d.model.brand })
	d.GetArchitectureFunc = get(g, "GetArchitecture", func() nvml.DeviceArchitecture { return d.model.arch })
	d.GetCudaComputeCapabilityFunc = guardPair(g, "GetCudaComputeCapability", d.computeCapability)
	d.GetNumGpuCoresFunc = get(g, "GetNumGpuCores", d.cudaCores)
	d.GetMemoryInfoFunc = get(g, "GetMemoryInfo", func() nvml.Memory { return memoryInfo(d.model.memoryMiB) })
	d.GetMemoryInfo_v2Func = get(g, "GetMemoryInfo_v2", func() nvml.Memory_v2 { return memoryInfoV2(d.model.memoryMiB) })
	d.GetPciInfoFunc = get(g, "GetPciInfo", d.pciInfo)
	d.GetNumaNodeIdFunc = guard(g, "GetNumaNodeId", d.numaNode)
	d.GetPersistenceModeFunc = get(g, "GetPersistenceMode", func() nvml.EnableState { return nvml.FEATURE_ENABLED })
	d.GetComputeModeFunc = get(g, "GetComputeMode", func() nvml.ComputeMode { return d.computeMode })
	d.SetComputeModeFunc = guardRet1(g, "SetComputeMode", d.setComputeMode)
	d.GetTopologyCommonAncestorFunc = guard1(g, "GetTopologyCommonAncestor", d.commonAncestor)
	d.GetP2PStatusFunc = guard2(g, "GetP2PStatus", d.p2pStatus)
	d.GetNvLinkStateFunc = guard1(g, "GetNvLinkState", d.nvlinkState)
	d.GetNvLinkRemotePciInfoFunc = guard1(g, "GetNvLinkRemotePciInfo", d.nvlinkRemotePciInfo)
	d.GetNvLinkRemoteDeviceTypeFunc = guard1(g, "GetNvLinkRemoteDeviceType", d.nvlinkRemoteDeviceType)
	d.GetGpuFabricInfoFunc = guard(g, "GetGpuFabricInfo", d.fabricInfo)
	d.setMIGFuncs()
	d.setEventFuncs()
}

// The methods below are the bodies of the NVML calls setFuncs models; each runs behind the
// device's gate, with m.mu held.

// serial is the board serial number: 13 digits derived from the UUID.
func (d *Device) serial() string {
	id := uuid.MustParse(strings.TrimPrefix(d.uuid, "GPU-"))
	return fmt.Sprintf("1%012d", uint64(id[0])<<32|uint64(id[1])<<24|uint64(id[2])<<16|uint64(id[3])<<8|uint64(id[4]))
}

func (d *Device) computeCapability() (major, minor int, ret nvml.Return) {
	return d.model.ccMajor, d.model.ccMinor, nvml.SUCCESS
}

func (d *Device) cudaCores() int {
	return d.multiprocessors() * coresPerSM(d.model.ccMajor, d.model.ccMinor)
}

// memoryInfo is GetMemoryInfo's answer for mib MiB of memory, all free.
func memoryInfo(mib uint64) nvml.Memory {
	total := mib << 20
	return nvml.Memory{Total: total, Free: total}
}

// memoryInfoV2 is GetMemoryInfo_v2's answer for mib MiB of memory, all free.
func memoryInfoV2(mib uint64) nvml.Memory_v2 {
	total := mib << 20
	return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: total, Free: total}
}

func (d *Device) pciInfo() nvml.PciInfo {
	return pciInfo(d.slot.busID, d.model.pciDeviceID, d.model.pciSubsystemID)
}

func (d *Device) numaNode() (int, nvml.Return) {
	if d.slot.numa < 0 {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return d.slot.numa, nvml.SUCCESS
}

func (d *Device) setComputeMode(mode nvml.ComputeMode) nvml.Return {
	if ret := validComputeMode(mode); ret != nvml.SUCCESS {
		return ret
	}
	d.computeMode = mode
	d.changed()
	return nvml.SUCCESS
}

func (d *Device) commonAncestor(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
	o := d.peer(other)
	if o == nil {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	return d.topologyLevel(o), nvml.SUCCESS
}

func (d *Device) p2pStatus(other nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
	o := d.peer(other)
	if o == nil || idx >= nvml.P2P_CAPS_INDEX_UNKNOWN {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	nvlink := d.nvlinked(o)
	switch {
	case o == d:
		return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
	case idx == nvml.P2P_CAPS_INDEX_NVLINK && !nvlink:
		return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
	case nvlink:
		return nvml.P2P_STATUS_OK, nvml.SUCCESS
	case d.topologyLevel(o) <= nvml.TOPOLOGY_HOSTBRIDGE:
		return nvml.P2P_STATUS_OK, nvml.SUCCESS
	default:
		return nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED, nvml.SUCCESS
	}
}

// nvlinkCheck answers the NVLink calls on link: a GPU without NVLink answers NOT_SUPPORTED; an
// A30 without a bridge has its links, all inactive, and NVML says nothing about their far end
// (needActive).
func (d *Device) nvlinkCheck(link int, needActive bool) nvml.Return {
	switch {
	case d.model.nvLinks == 0 || d.m.spec.nvlink == nvlinkNone:
		return nvml.ERROR_NOT_SUPPORTED
	case link < 0 || link >= d.model.nvLinks:
		return nvml.ERROR_INVALID_ARGUMENT
	case needActive && d.m.spec.nvlink == nvlinkBridge && d.bridgePartner() == nil:
		return nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.SUCCESS
}

func (d *Device) nvlinkState(link int) (nvml.EnableState, nvml.Return) {
	if ret := d.nvlinkCheck(link, false); ret != nvml.SUCCESS {
		return 0, ret
	}
	if d.m.spec.nvlink == nvlinkBridge && d.bridgePartner() == nil {
		return nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	return nvml.FEATURE_ENABLED, nvml.SUCCESS
}

func (d *Device) nvlinkRemotePciInfo(link int) (nvml.PciInfo, nvml.Return) {
	if ret := d.nvlinkCheck(link, true); ret != nvml.SUCCESS {
		return nvml.PciInfo{}, ret
	}
	bus, p := d.nvlinkRemote(link)
	if p != nil {
		return pciInfo(bus, p.model.pciDeviceID, p.model.pciSubsystemID), nvml.SUCCESS
	}
	return pciInfo(bus, switchPCIDeviceID, 0), nvml.SUCCESS
}

func (d *Device) nvlinkRemoteDeviceType(link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
	if ret := d.nvlinkCheck(link, true); ret != nvml.SUCCESS {
		return 0, ret
	}
	if _, p := d.nvlinkRemote(link); p != nil {
		return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
	}
	return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
}

func (d *Device) fabricInfo() (nvml.GpuFabricInfo, nvml.Return) {
	m := d.m
	if !m.spec.fabric {
		return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	if d.fabric != nil {
		return *d.fabric, nvml.SUCCESS
	}
	return defaultFabric(m.spec.name), nvml.SUCCESS
}

// validComputeMode answers as NVML's SetComputeMode does for a mode it cannot set.
func validComputeMode(mode nvml.ComputeMode) nvml.Return {
	switch mode {
	case nvml.COMPUTEMODE_DEFAULT, nvml.COMPUTEMODE_PROHIBITED, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return nvml.SUCCESS
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return nvml.ERROR_NOT_SUPPORTED // removed from NVML
	}
	return nvml.ERROR_INVALID_ARGUMENT
}
