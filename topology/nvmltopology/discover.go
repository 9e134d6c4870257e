package nvmltopology

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"

	"github.com/gpudra/gpudra/internal/nvmlpci"
	"github.com/gpudra/gpudra/topology"
)

// DefaultSysfsRoot is where Discover looks for sysfs unless WithSysfsRoot or WithoutSysfs says
// otherwise.
const DefaultSysfsRoot = "/sys"

// Option configures Discover.
type Option func(*config)

type config struct {
	sysfsRoot string // "" disables sysfs
}

// WithSysfsRoot makes Discover resolve PCIe roots under root instead of /sys, e.g. a fake sysfs
// tree in a test or the host's sysfs mounted into a container.
func WithSysfsRoot(root string) Option { return func(c *config) { c.sysfsRoot = root } }

// WithoutSysfs makes Discover derive every PCIe root from NVML's topology and never read
// sysfs. Use it with fake NVML machines, whose bus IDs mean nothing on the host running the test.
func WithoutSysfs() Option { return func(c *config) { c.sysfsRoot = "" } }

// Error is an NVML call that failed during Discover with something other than
// ERROR_NOT_SUPPORTED. errors.Is(err, nvml.ERROR_GPU_IS_LOST) and the like work on it.
type Error struct {
	// GPU is the NVML index of the GPU the call was made on, -1 for calls on the library.
	GPU int
	// Op is the NVML method, e.g. "GetTopologyCommonAncestor".
	Op string
	// Arg names the call's argument when it has one, e.g. "link 3" or "GPU 5"; else "".
	Arg string
	// Return is the NVML error code.
	Return nvml.Return
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("topology: ")
	if e.GPU >= 0 {
		fmt.Fprintf(&b, "GPU %d: ", e.GPU)
	}
	b.WriteString(e.Op)
	if e.Arg != "" {
		fmt.Fprintf(&b, "(%s)", e.Arg)
	}
	fmt.Fprintf(&b, ": %v", e.Return)
	return b.String()
}

// Unwrap returns the NVML return code.
func (e *Error) Unwrap() error { return e.Return }

// Discover reads the interconnect of every GPU through lib, which must already be initialized
// (Discover neither initializes nor shuts it down).
//
// For each GPU it reads the PCI bus ID, the NUMA node, every active NVLink and its far end, and
// the NVLink fabric membership; for each pair of GPUs the PCIe common ancestor and the P2P read
// status. A call that answers ERROR_NOT_SUPPORTED leaves the value unknown (NUMA node -1, level
// LevelUnknown, no NVLink, no fabric); any other failure stops Discover with an *Error naming the
// GPU and the call.
//
// NVML's common-ancestor levels map to the matrix levels as `nvidia-smi topo -m` prints them:
// INTERNAL and SINGLE to PIX, MULTIPLE to PXB, HOSTBRIDGE to PHB, NODE to NODE, SYSTEM to SYS.
// The NVLink count of a pair is the number of links wired directly between the two plus, on
// NVSwitch systems, the smaller of the two GPUs' link counts into the NVSwitches both reach.
//
// PCIe roots are resolved through sysfs first, exactly as the Kubernetes standard attribute
// resource.kubernetes.io/pcieRoot defines them (the "pciDDDD:BB" directory above the device in
// /sys/devices). When sysfs does not know a GPU (a fake machine, a host without sysfs, or
// WithoutSysfs), the root is derived from NVML: GPUs whose common ancestor is PIX, PXB or PHB sit
// under the same host bridge and so share a root complex. The group takes the sysfs root of its
// lowest-indexed member when one has it, and otherwise the synthesized name
// "pci<domain>:<bus>" built from the lowest (domain, bus) of its members, written like a sysfs
// root. A derived name is only meant to be compared with other roots of the same node: two GPUs
// have equal roots exactly when they share a host bridge.
//
// NVLink domains come from GetGpuFabricInfo: a GPU whose fabric state is COMPLETED, whose
// fabric status is SUCCESS and whose cluster UUID is not zero belongs to the domain of its
// cluster UUID and clique id.
func Discover(lib nvml.Interface, opts ...Option) (*topology.Topology, error) {
	if lib == nil {
		return nil, errors.New("topology: Discover: nil nvml.Interface")
	}
	c := config{sysfsRoot: DefaultSysfsRoot}
	for _, o := range opts {
		o(&c)
	}
	gpus, devs, err := readGPUs(lib)
	if err != nil {
		return nil, err
	}
	n := len(gpus)
	t := &topology.Topology{GPUs: gpus, Links: make([][]topology.Link, n)}
	for i := range n {
		t.Links[i] = make([]topology.Link, n)
	}
	byBus := make(map[string]int, n)
	for i, g := range t.GPUs {
		if g.PCIBusID != "" {
			byBus[g.PCIBusID] = i
		}
	}
	remotes := make([][]remote, n)
	for i, d := range devs {
		r, err := readNVLinks(i, d)
		if err != nil {
			return nil, err
		}
		remotes[i] = r
		t.GPUs[i].NVLinks = len(r)
		t.GPUs[i].Peers = peers(r, byBus)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			l, err := readPair(i, j, devs[i], devs[j])
			if err != nil {
				return nil, err
			}
			l.NVLinks = nvlinksBetween(t.GPUs[i], t.GPUs[j])
			t.Links[i][j], t.Links[j][i] = l, l
		}
	}
	assignRoots(t, c)
	t.Domains = domains(t.GPUs)
	return t, nil
}

// GPUs reads what Discover reads of each GPU alone, through lib (initialized, as for Discover):
// UUID, PCI bus ID, NUMA node and NVLink fabric membership, with Discover's rules for
// ERROR_NOT_SUPPORTED and errors. It reads no NVLink, no pair of GPUs and no sysfs: four NVML
// calls a GPU, for callers that need only the fabric (a ComputeDomain plugin asks on every
// listing and prepare). NVLinks, Peers and PCIeRoot stay unset.
func GPUs(lib nvml.Interface) ([]topology.GPU, error) {
	if lib == nil {
		return nil, errors.New("topology: GPUs: nil nvml.Interface")
	}
	gpus, _, err := readGPUs(lib)
	return gpus, err
}

// readGPUs reads every GPU (readGPU) and returns them with their handles.
func readGPUs(lib nvml.Interface) ([]topology.GPU, []nvml.Device, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nil, &Error{GPU: -1, Op: "DeviceGetCount", Return: ret}
	}
	gpus, devs := make([]topology.GPU, n), make([]nvml.Device, n)
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, nil, &Error{GPU: i, Op: "DeviceGetHandleByIndex", Return: ret}
		}
		g, err := readGPU(i, d)
		if err != nil {
			return nil, nil, err
		}
		gpus[i], devs[i] = g, d
	}
	return gpus, devs, nil
}

func readGPU(i int, d nvml.Device) (topology.GPU, error) {
	g := topology.GPU{Index: i, NUMANode: -1}
	u, ret := d.GetUUID()
	switch ret {
	case nvml.SUCCESS:
		g.UUID = u
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return g, &Error{GPU: i, Op: "GetUUID", Return: ret}
	}
	pci, ret := d.GetPciInfo()
	switch ret {
	case nvml.SUCCESS:
		g.PCIBusID = nvmlpci.BusID(pci)
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return g, &Error{GPU: i, Op: "GetPciInfo", Return: ret}
	}
	numa, ret := d.GetNumaNodeId()
	switch ret {
	case nvml.SUCCESS:
		g.NUMANode = numa
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return g, &Error{GPU: i, Op: "GetNumaNodeId", Return: ret}
	}
	// GetGpuFabricInfoV's handler only works on a real NVML device handle; the v1 call is the one
	// every implementation of nvml.Device (fakes included) answers and carries all we need.
	f, ret := d.GetGpuFabricInfo()
	switch ret {
	case nvml.SUCCESS:
		if f.State == nvml.GPU_FABRIC_STATE_COMPLETED && nvml.Return(f.Status) == nvml.SUCCESS && f.ClusterUuid != [16]uint8{} {
			g.Fabric = &topology.Fabric{ClusterUUID: uuid.UUID(f.ClusterUuid).String(), CliqueID: f.CliqueId}
		}
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return g, &Error{GPU: i, Op: "GetGpuFabricInfo", Return: ret}
	}
	return g, nil
}

// remote is the far end of one active NVLink.
type remote struct {
	busID    string // "" when NVML could not name it
	isSwitch bool
}

// readNVLinks returns the far ends of the active NVLinks of GPU i. Links NVML answers
// ERROR_NOT_SUPPORTED or ERROR_INVALID_ARGUMENT for do not exist on this GPU.
func readNVLinks(i int, d nvml.Device) ([]remote, error) {
	var out []remote
	for l := range nvml.NVLINK_MAX_LINKS {
		st, ret := d.GetNvLinkState(l)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			return nil, &Error{GPU: i, Op: "GetNvLinkState", Arg: fmt.Sprintf("link %d", l), Return: ret}
		}
		if st != nvml.FEATURE_ENABLED {
			continue
		}
		var r remote
		pci, ret := d.GetNvLinkRemotePciInfo(l)
		switch ret {
		case nvml.SUCCESS:
			r.busID = nvmlpci.BusID(pci)
		case nvml.ERROR_NOT_SUPPORTED:
		default:
			return nil, &Error{GPU: i, Op: "GetNvLinkRemotePciInfo", Arg: fmt.Sprintf("link %d", l), Return: ret}
		}
		typ, ret := d.GetNvLinkRemoteDeviceType(l)
		switch ret {
		case nvml.SUCCESS:
			r.isSwitch = typ == nvml.NVLINK_DEVICE_TYPE_SWITCH
		case nvml.ERROR_NOT_SUPPORTED:
		default:
			return nil, &Error{GPU: i, Op: "GetNvLinkRemoteDeviceType", Arg: fmt.Sprintf("link %d", l), Return: ret}
		}
		out = append(out, r)
	}
	return out, nil
}

// peers groups the named far ends of a GPU's links by bus ID, sorted by bus ID.
func peers(rs []remote, byBus map[string]int) []topology.Peer {
	var out []topology.Peer
	for _, r := range rs {
		if r.busID == "" {
			continue
		}
		k := slices.IndexFunc(out, func(p topology.Peer) bool { return p.BusID == r.busID })
		if k < 0 {
			gpu, ok := byBus[r.busID]
			if !ok || r.isSwitch {
				gpu = -1
			}
			out = append(out, topology.Peer{BusID: r.busID, GPU: gpu, Switch: r.isSwitch})
			k = len(out) - 1
		}
		out[k].Links++
	}
	slices.SortFunc(out, func(a, b topology.Peer) int { return strings.Compare(a.BusID, b.BusID) })
	return out
}

// nvlinksBetween counts the direct links between a and b plus the links through NVSwitches both
// reach (the smaller of the two sides).
func nvlinksBetween(a, b topology.GPU) int {
	direct := func(from topology.GPU, to topology.GPU) int {
		for _, p := range from.Peers {
			if to.PCIBusID != "" && p.BusID == to.PCIBusID && !p.Switch {
				return p.Links
			}
		}
		return 0
	}
	n := max(direct(a, b), direct(b, a))
	var viaA, viaB int
	for _, p := range a.Peers {
		if !p.Switch {
			continue
		}
		for _, q := range b.Peers {
			if q.Switch && q.BusID == p.BusID {
				viaA += p.Links
				viaB += q.Links
			}
		}
	}
	return n + min(viaA, viaB)
}

func readPair(i, j int, a, b nvml.Device) (topology.Link, error) {
	var l topology.Link
	lvl, ret := a.GetTopologyCommonAncestor(b)
	switch ret {
	case nvml.SUCCESS:
		l.PCIe = levelOf(lvl)
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return l, &Error{GPU: i, Op: "GetTopologyCommonAncestor", Arg: fmt.Sprintf("GPU %d", j), Return: ret}
	}
	p2p := func(from, to int, x, y nvml.Device) (bool, error) {
		st, ret := x.GetP2PStatus(y, nvml.P2P_CAPS_INDEX_READ)
		switch ret {
		case nvml.SUCCESS:
			return st == nvml.P2P_STATUS_OK, nil
		case nvml.ERROR_NOT_SUPPORTED:
			return false, nil
		}
		return false, &Error{GPU: from, Op: "GetP2PStatus", Arg: fmt.Sprintf("GPU %d, read", to), Return: ret}
	}
	ab, err := p2p(i, j, a, b)
	if err != nil {
		return l, err
	}
	ba, err := p2p(j, i, b, a)
	if err != nil {
		return l, err
	}
	l.P2P = ab && ba
	return l, nil
}

func levelOf(l nvml.GpuTopologyLevel) topology.Level {
	switch l {
	case nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE:
		return topology.LevelPIX
	case nvml.TOPOLOGY_MULTIPLE:
		return topology.LevelPXB
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return topology.LevelPHB
	case nvml.TOPOLOGY_NODE:
		return topology.LevelNode
	case nvml.TOPOLOGY_SYSTEM:
		return topology.LevelSys
	}
	return topology.LevelUnknown
}

// domains groups the GPUs with a fabric by cluster and clique.
func domains(gpus []topology.GPU) []topology.Domain {
	var out []topology.Domain
	for _, g := range gpus {
		if g.Fabric == nil {
			continue
		}
		k := slices.IndexFunc(out, func(d topology.Domain) bool { return d.Fabric == *g.Fabric })
		if k < 0 {
			out = append(out, topology.Domain{Fabric: *g.Fabric})
			k = len(out) - 1
		}
		out[k].GPUs = append(out[k].GPUs, g.Index)
	}
	slices.SortFunc(out, func(a, b topology.Domain) int {
		if c := strings.Compare(a.ClusterUUID, b.ClusterUUID); c != 0 {
			return c
		}
		return cmp.Compare(a.CliqueID, b.CliqueID)
	})
	return out
}
