package topology

import (
	"fmt"

	"github.com/gpudra/gpudra/internal/pciaddr"
)

// Level is how two GPUs reach each other over PCIe, from the tightest (PIX) to the loosest (SYS),
// with the same meaning as the PCIe entries of `nvidia-smi topo -m`. The zero value is
// LevelUnknown.
type Level uint8

// PCIe levels. The numeric order is not the order of tightness for LevelUnknown; use Rank.
const (
	// LevelUnknown means NVML could not say (ERROR_NOT_SUPPORTED, or the diagonal).
	LevelUnknown Level = iota
	// LevelPIX: the path crosses at most one PCIe bridge (NVML TOPOLOGY_INTERNAL or SINGLE).
	LevelPIX
	// LevelPXB: the path crosses several PCIe bridges but no host bridge (TOPOLOGY_MULTIPLE).
	LevelPXB
	// LevelPHB: the path crosses a PCIe host bridge, i.e. the CPU's root complex
	// (TOPOLOGY_HOSTBRIDGE).
	LevelPHB
	// LevelNode: the path crosses host bridges inside one NUMA node (TOPOLOGY_NODE).
	LevelNode
	// LevelSys: the path crosses the link between NUMA nodes, e.g. UPI or xGMI
	// (TOPOLOGY_SYSTEM).
	LevelSys
)

// String returns the matrix abbreviation: PIX, PXB, PHB, NODE, SYS, or N/A for LevelUnknown.
func (l Level) String() string {
	switch l {
	case LevelPIX:
		return "PIX"
	case LevelPXB:
		return "PXB"
	case LevelPHB:
		return "PHB"
	case LevelNode:
		return "NODE"
	case LevelSys:
		return "SYS"
	case LevelUnknown:
		return "N/A"
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// MarshalText encodes the level as its String form, so JSON and YAML show "PXB", not a number.
func (l Level) MarshalText() ([]byte, error) {
	if l > LevelSys {
		return nil, fmt.Errorf("topology: invalid level %d", uint8(l))
	}
	return []byte(l.String()), nil
}

// UnmarshalText decodes a level written by MarshalText.
func (l *Level) UnmarshalText(b []byte) error {
	for v := LevelUnknown; v <= LevelSys; v++ {
		if v.String() == string(b) {
			*l = v
			return nil
		}
	}
	return fmt.Errorf("topology: unknown level %q (want PIX, PXB, PHB, NODE, SYS or N/A)", b)
}

// Rank orders levels by tightness: 1 for PIX up to 5 for SYS, and 6 for LevelUnknown, which
// counts as worse than any known level.
func (l Level) Rank() int {
	if l == LevelUnknown || l > LevelSys {
		return int(LevelSys) + 1
	}
	return int(l)
}

// Link is how one GPU reaches another.
type Link struct {
	// NVLinks is the number of active NVLinks between the pair: links wired directly from one
	// GPU to the other plus, on NVSwitch systems, the links both GPUs have into the NVSwitches
	// they share (the smaller of the two counts). 0 means no NVLink path.
	NVLinks int `json:"nvlinks"`
	// PCIe is the PCIe common-ancestor level of the pair.
	PCIe Level `json:"pcie"`
	// P2P reports whether NVML allows peer-to-peer reads in both directions.
	P2P bool `json:"p2p"`
}

// String returns the matrix entry: "NV#" when the pair has NVLinks, else the PCIe level.
func (l Link) String() string {
	if l.NVLinks > 0 {
		return fmt.Sprintf("NV%d", l.NVLinks)
	}
	return l.PCIe.String()
}

// RootSource says where a GPU's PCIe root name came from.
type RootSource string

// PCIe root sources.
const (
	// RootNone: no PCIe root is known (no PCI bus ID).
	RootNone RootSource = ""
	// RootSysfs: resolved from /sys/bus/pci/devices/<bdf>, as the Kubernetes standard attribute
	// resource.kubernetes.io/pcieRoot is defined.
	RootSysfs RootSource = "sysfs"
	// RootDerived: sysfs did not know the device; the name was derived from NVML's topology
	// (see nvmltopology.Discover).
	RootDerived RootSource = "derived"
)

// Peer is the far end of one or more NVLinks of a GPU.
type Peer struct {
	// BusID is the peer's canonical PCI bus ID ("dddd:bb:dd.f").
	BusID string `json:"busID"`
	// GPU is the peer's index when it is one of the discovered GPUs, else -1.
	GPU int `json:"gpu"`
	// Switch reports whether the peer is an NVSwitch.
	Switch bool `json:"switch,omitempty"`
	// Links is the number of active links to this peer.
	Links int `json:"links"`
}

// GPU is what nvmltopology.Discover learned about one GPU.
type GPU struct {
	// Index is the NVML index.
	Index int `json:"index"`
	// UUID is the NVML UUID, "" when NVML does not report one.
	UUID string `json:"uuid,omitempty"`
	// PCIBusID is the canonical lower-case "dddd:bb:dd.f" address, "" when unknown.
	PCIBusID string `json:"pciBusID,omitempty"`
	// NUMANode is the GPU's NUMA node, -1 when unknown.
	NUMANode int `json:"numaNode"`
	// PCIeRoot is the PCIe root complex in the form of the standard attribute
	// resource.kubernetes.io/pcieRoot ("pci0000:00"), "" when unknown.
	PCIeRoot string `json:"pcieRoot,omitempty"`
	// PCIeRootSource says how PCIeRoot was found.
	PCIeRootSource RootSource `json:"pcieRootSource,omitempty"`
	// NVLinks is the number of active NVLinks.
	NVLinks int `json:"nvlinks"`
	// Peers are the far ends of the active NVLinks whose remote NVML could name, by bus ID.
	Peers []Peer `json:"peers,omitempty"`
	// Fabric is the GPU's NVLink fabric membership (GB200 and later), nil when the GPU is in
	// none.
	Fabric *Fabric `json:"fabric,omitempty"`
}

// Fabric is a GPU's place in a multi-node NVLink fabric as NVML reports it once the fabric
// manager has registered the GPU.
type Fabric struct {
	// ClusterUUID is the NVLink fabric cluster the GPU belongs to.
	ClusterUUID string `json:"clusterUUID"`
	// CliqueID is the clique within the cluster: GPUs with the same cluster and clique reach each
	// other over NVLink, also across nodes.
	CliqueID uint32 `json:"cliqueID"`
}

// DomainID returns "<clusterUUID>.<cliqueID>", the identity of the NVLink domain.
func (f Fabric) DomainID() string { return fmt.Sprintf("%s.%d", f.ClusterUUID, f.CliqueID) }

// Domain is a set of GPUs of this node in the same NVLink domain (fabric cluster and clique).
type Domain struct {
	Fabric
	// GPUs are the indexes of the member GPUs, ascending.
	GPUs []int `json:"gpus"`
}

// Topology is the interconnect of a node's GPUs.
type Topology struct {
	// GPUs are indexed by NVML index: GPUs[i].Index == i.
	GPUs []GPU `json:"gpus"`
	// Links[i][j] is how GPU i reaches GPU j; the matrix is symmetric and the diagonal is the
	// zero Link.
	Links [][]Link `json:"links"`
	// Domains are the NVLink domains the GPUs belong to, sorted by cluster UUID and clique id;
	// empty when no GPU reports a fabric.
	Domains []Domain `json:"domains,omitempty"`
}

// Link returns how GPU i reaches GPU j, the zero Link when i == j or either is out of range.
func (t *Topology) Link(i, j int) Link {
	if i == j || i < 0 || j < 0 || i >= len(t.Links) || j >= len(t.Links[i]) {
		return Link{}
	}
	return t.Links[i][j]
}

// PCIeRoot returns the PCIe root of the GPU at busID ("pci0000:00"), or "" when no GPU has that
// bus ID or its root is unknown. busID may be in any case and use NVML's 8-digit domain. The
// method value fits gpudra.WithPCIeRoot.
func (t *Topology) PCIeRoot(busID string) string {
	b, err := pciaddr.Canonical(busID)
	if err != nil {
		return ""
	}
	for _, g := range t.GPUs {
		if g.PCIBusID == b {
			return g.PCIeRoot
		}
	}
	return ""
}
