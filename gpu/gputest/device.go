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

func (d *Device) setFuncs() {
	m := d.m
	d.GetIndexFunc = func() (int, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetIndex"); ret != nvml.SUCCESS {
			return 0, ret
		}
		return d.index, nvml.SUCCESS
	}
	d.GetMinorNumberFunc = func() (int, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetMinorNumber"); ret != nvml.SUCCESS {
			return 0, ret
		}
		return d.index, nvml.SUCCESS
	}
	d.GetUUIDFunc = func() (string, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetUUID"); ret != nvml.SUCCESS {
			return "", ret
		}
		return d.uuid, nvml.SUCCESS
	}
	d.GetNameFunc = func() (string, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetName"); ret != nvml.SUCCESS {
			return "", ret
		}
		return d.model.productName, nvml.SUCCESS
	}
	d.GetSerialFunc = func() (string, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetSerial"); ret != nvml.SUCCESS {
			return "", ret
		}
		id := uuid.MustParse(strings.TrimPrefix(d.uuid, "GPU-"))
		return fmt.Sprintf("1%012d", uint64(id[0])<<32|uint64(id[1])<<24|uint64(id[2])<<16|uint64(id[3])<<8|uint64(id[4])), nvml.SUCCESS
	}
	d.GetBrandFunc = func() (nvml.BrandType, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetBrand"); ret != nvml.SUCCESS {
			return 0, ret
		}
		return d.model.brand, nvml.SUCCESS
	}
	d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetArchitecture"); ret != nvml.SUCCESS {
			return 0, ret
		}
		return d.model.arch, nvml.SUCCESS
	}
	d.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetCudaComputeCapability"); ret != nvml.SUCCESS {
			return 0, 0, ret
		}
		return d.model.ccMajor, d.model.ccMinor, nvml.SUCCESS
	}
	d.GetNumGpuCoresFunc = func() (int, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetNumGpuCores"); ret != nvml.SUCCESS {
			return 0, ret
		}
		return d.multiprocessors() * coresPerSM(d.model.ccMajor, d.model.ccMinor), nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetMemoryInfo"); ret != nvml.SUCCESS {
			return nvml.Memory{}, ret
		}
		total := d.model.memoryMiB << 20
		return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
	}
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetMemoryInfo_v2"); ret != nvml.SUCCESS {
			return nvml.Memory_v2{}, ret
		}
		total := d.model.memoryMiB << 20
		return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: total, Free: total}, nvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetPciInfo"); ret != nvml.SUCCESS {
			return nvml.PciInfo{}, ret
		}
		return pciInfo(d.slot.busID, d.model.pciDeviceID, d.model.pciSubsystemID), nvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetNumaNodeId"); ret != nvml.SUCCESS {
			return 0, ret
		}
		if d.slot.numa < 0 {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return d.slot.numa, nvml.SUCCESS
	}
	d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetPersistenceMode"); ret != nvml.SUCCESS {
			return 0, ret
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetComputeMode"); ret != nvml.SUCCESS {
			return 0, ret
		}
		return d.computeMode, nvml.SUCCESS
	}
	d.SetComputeModeFunc = func(mode nvml.ComputeMode) nvml.Return {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("SetComputeMode"); ret != nvml.SUCCESS {
			return ret
		}
		if ret := validComputeMode(mode); ret != nvml.SUCCESS {
			return ret
		}
		d.computeMode = mode
		d.changed()
		return nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetTopologyCommonAncestor"); ret != nvml.SUCCESS {
			return 0, ret
		}
		o := d.peer(other)
		if o == nil {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return d.topologyLevel(o), nvml.SUCCESS
	}
	d.GetP2PStatusFunc = func(other nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetP2PStatus"); ret != nvml.SUCCESS {
			return 0, ret
		}
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
	// A GPU without NVLink answers NOT_SUPPORTED; an A30 without a bridge has its links, all
	// inactive, and NVML says nothing about their far end.
	nvlinkCheck := func(link int, needActive bool) nvml.Return {
		switch {
		case d.model.nvLinks == 0 || m.spec.nvlink == nvlinkNone:
			return nvml.ERROR_NOT_SUPPORTED
		case link < 0 || link >= d.model.nvLinks:
			return nvml.ERROR_INVALID_ARGUMENT
		case needActive && m.spec.nvlink == nvlinkBridge && d.bridgePartner() == nil:
			return nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetNvLinkState"); ret != nvml.SUCCESS {
			return 0, ret
		}
		if ret := nvlinkCheck(link, false); ret != nvml.SUCCESS {
			return 0, ret
		}
		if m.spec.nvlink == nvlinkBridge && d.bridgePartner() == nil {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetNvLinkRemotePciInfo"); ret != nvml.SUCCESS {
			return nvml.PciInfo{}, ret
		}
		if ret := nvlinkCheck(link, true); ret != nvml.SUCCESS {
			return nvml.PciInfo{}, ret
		}
		bus, p := d.nvlinkRemote(link)
		if p != nil {
			return pciInfo(bus, p.model.pciDeviceID, p.model.pciSubsystemID), nvml.SUCCESS
		}
		return pciInfo(bus, switchPCIDeviceID, 0), nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetNvLinkRemoteDeviceType"); ret != nvml.SUCCESS {
			return 0, ret
		}
		if ret := nvlinkCheck(link, true); ret != nvml.SUCCESS {
			return 0, ret
		}
		if _, p := d.nvlinkRemote(link); p != nil {
			return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
		}
		return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
	}
	d.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ret := d.enter("GetGpuFabricInfo"); ret != nvml.SUCCESS {
			return nvml.GpuFabricInfo{}, ret
		}
		if !m.spec.fabric {
			return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.GpuFabricInfo{
			ClusterUuid: uuid.NewSHA1(uuidNamespace, []byte(m.spec.name+"/fabric")),
			Status:      uint32(nvml.SUCCESS),
			CliqueId:    1,
			State:       nvml.GPU_FABRIC_STATE_COMPLETED,
		}, nvml.SUCCESS
	}
	d.setMIGFuncs()
	d.setEventFuncs()
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
