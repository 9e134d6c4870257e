package gpudra

import (
	"cmp"
	"slices"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/topology"
)

// Attributes in the driver's domain that say where a GPU sits in the node's interconnect, so
// that a claim can keep its GPUs together with matchAttribute (WithTopology). Each partitions the
// node's GPUs into groups; a value names one group and is derived from the hardware, so the same
// GPUs in the same slots get the same value after every restart. Values are opaque: compare them,
// do not parse them. MIG devices (static and dynamic) carry the attributes of their GPU. Like the
// other Attr constants (slices.go), they are in the driver's domain; the PCIe root the topology
// also uses is Kubernetes' standard StdAttrPCIeRoot (resource.kubernetes.io/pcieRoot).
const (
	// AttrNVLinkIsland (string) names the GPU's NVLink island: the GPUs it reaches over NVLink,
	// directly or through NVSwitches, and those they reach (topology.Topology.Islands). Every GPU
	// of an NVSwitch baseboard shares one island; two GPUs joined by an NVLink bridge form their
	// own. Left out for a GPU with no NVLink to another GPU.
	AttrNVLinkIsland resourceapi.QualifiedName = "nvlinkIsland"
	// AttrNVLinkDomain (string) is the GPU's multi-node NVLink fabric domain,
	// "<clusterUUID>.<cliqueID>" as NVML reports it once the fabric manager has registered the
	// GPU (GB200 and later; the same identity as an IMEX/ComputeDomain clique). GPUs of several
	// nodes share it. Left out when the GPU is in no fabric.
	AttrNVLinkDomain resourceapi.QualifiedName = "nvlinkDomain"
	// AttrPCIeSwitch (string) names the PCIe switch (or tree of switches) the GPU shares with
	// other GPUs below their host bridge (topology.Topology.PCIeSwitches). Published only where
	// it differs from the root: where a root complex has GPUs behind more than one switch. Where
	// a switch holds every GPU of its root, match on resource.kubernetes.io/pcieRoot.
	AttrPCIeSwitch resourceapi.QualifiedName = "pcieSwitch"
	// AttrNVLinkCliques (list of strings, only with WithListAttributes) names every maximal set
	// of GPUs that have NVLinks between each pair that the GPU belongs to
	// (topology.Topology.NVLinkCliques). With list attributes matchAttribute requires a common
	// element, so a claim constrained on it gets GPUs that are all linked to each other, which
	// the island cannot promise on a partial mesh. Left out for a GPU on no island.
	AttrNVLinkCliques resourceapi.QualifiedName = "nvlinkCliques"
)

// WithTopology publishes where each GPU sits in the node's interconnect, from t (as
// nvmltopology.Discover returns it for the same NVML library the inventory came from): the
// attributes AttrNVLinkIsland, AttrNVLinkDomain and AttrPCIeSwitch where they apply, and
// resource.kubernetes.io/pcieRoot from t unless WithPCIeRoot says otherwise. It also publishes
// full GPUs and static MIG devices in the order t.Order gives (GPUs on no NVLink island first,
// then the islands from the smallest, each island's GPUs together, NUMA nodes and PCIe roots
// together within), so that the scheduler's first-fit allocator gives a claim for several GPUs
// ones that sit together and keeps whole islands free for the claims that need them; dynamic MIG
// partitions keep their own order. GPUs are matched with t by UUID, else by PCI bus ID; a GPU t
// does not know gets none of these attributes and comes after the others. A nil t is ignored.
func WithTopology(t *topology.Topology) Option {
	return func(b *Builder) {
		if t != nil {
			b.topo = newPlacements(t)
		}
	}
}

// WithListAttributes also publishes the list-valued form of the topology attributes where a
// list describes a GPU better than one value: AttrNVLinkCliques (with WithTopology). List
// attributes are alpha in Kubernetes 1.37 (KEP-5491, feature gate DRAListTypeAttributes); an API
// server without the gate drops their values and then rejects the slice, so turn this on only
// where the gate is. Slices holding devices with list attributes are limited to 64 devices.
func WithListAttributes() Option { return func(b *Builder) { b.listAttributes = true } }

// placement is where one GPU sits, as WithTopology publishes it.
type placement struct {
	order                                int // position in topology.Order
	island, domain, pcieSwitch, pcieRoot string
	cliques                              []string
}

// placements indexes a topology's GPUs by UUID and PCI bus ID.
type placements struct {
	byUUID, byBus map[string]*placement
}

func newPlacements(t *topology.Topology) *placements {
	ps := make([]placement, len(t.GPUs))
	for pos, i := range t.Order() {
		ps[i].order = pos
	}
	for _, g := range t.Islands() {
		for _, i := range g.GPUs {
			ps[i].island = g.ID
		}
	}
	for _, g := range t.PCIeSwitches() {
		for _, i := range g.GPUs {
			ps[i].pcieSwitch = g.ID
		}
	}
	for _, g := range t.NVLinkCliques() {
		for _, i := range g.GPUs {
			if g.ID != "" {
				ps[i].cliques = append(ps[i].cliques, g.ID)
			}
		}
	}
	out := &placements{byUUID: map[string]*placement{}, byBus: map[string]*placement{}}
	for i, g := range t.GPUs {
		p := &ps[i]
		p.pcieRoot = g.PCIeRoot
		if g.Fabric != nil {
			p.domain = g.Fabric.DomainID()
		}
		slices.Sort(p.cliques)
		if g.UUID != "" {
			out.byUUID[g.UUID] = p
		}
		if g.PCIBusID != "" {
			out.byBus[g.PCIBusID] = p
		}
	}
	return out
}

// of returns the placement of g, or nil when the topology does not know it.
func (ps *placements) of(g *gpu.GPU) *placement {
	if ps == nil {
		return nil
	}
	if p, ok := ps.byUUID[g.UUID]; ok && g.UUID != "" {
		return p
	}
	if p, ok := ps.byBus[g.PCIBusID]; ok && g.PCIBusID != "" {
		return p
	}
	return nil
}

// setPlacement adds the topology attributes of g to attrs.
func (b *Builder) setPlacement(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, g *gpu.GPU) {
	p := b.topo.of(g)
	if p == nil {
		return
	}
	for name, v := range map[resourceapi.QualifiedName]string{AttrNVLinkIsland: p.island, AttrNVLinkDomain: p.domain, AttrPCIeSwitch: p.pcieSwitch} {
		if v != "" {
			attrs[name] = str(v)
		}
	}
	if b.listAttributes && len(p.cliques) > 0 {
		attrs[AttrNVLinkCliques] = resourceapi.DeviceAttribute{StringValues: slices.Clone(p.cliques)}
	}
}

// pcieRootOf resolves the PCIe root of g: WithPCIeRoot's function, else the topology's.
func (b *Builder) pcieRootOf(g *gpu.GPU) string {
	if b.pcieRoot != nil {
		return b.pcieRoot(g.PCIBusID)
	}
	if p := b.topo.of(g); p != nil {
		return p.pcieRoot
	}
	return ""
}

// gpuOrder returns the positions in inv.GPUs in publishing order: by index without WithTopology,
// else in the topology's order with the GPUs it does not know last, by index.
func (b *Builder) gpuOrder(inv *gpu.Inventory) []int {
	out := make([]int, len(inv.GPUs))
	for i := range out {
		out[i] = i
	}
	if b.topo == nil {
		return out
	}
	key := func(i int) int {
		if p := b.topo.of(&inv.GPUs[i]); p != nil {
			return p.order
		}
		return 1<<30 + i
	}
	slices.SortStableFunc(out, func(x, y int) int { return cmp.Compare(key(x), key(y)) })
	return out
}
