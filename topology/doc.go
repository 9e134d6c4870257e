// Package topology describes how a node's GPUs are connected: NVLinks (direct or through
// NVSwitches), the PCIe path between every pair, each GPU's NUMA node and PCIe root complex, and
// the NVLink domains (fabric cluster and clique) of GB200-class systems.
//
// Package topology/nvmltopology reads all of it through NVML (its Discover) into a Topology of
// plain values; this package groups, ranks and renders a Topology, does not use NVML and builds
// without cgo. The link matrix uses the vocabulary of `nvidia-smi topo -m`: NV# for # NVLinks,
// then PIX, PXB, PHB, NODE and SYS from the tightest PCIe path to the loosest. Render prints it
// in that style.
//
// PCIe roots follow the Kubernetes standard attribute resource.kubernetes.io/pcieRoot: Discover
// reads them from sysfs, and derives them from NVML's topology when sysfs does not know the
// device, so fake machines and non-Linux hosts still get roots that group GPUs by host bridge.
// The method value Topology.PCIeRoot fits the root package's gpudra.WithPCIeRoot; GPU.NUMANode
// feeds resource.kubernetes.io/numaNode.
//
// Islands, PCIeSwitches and NVLinkCliques partition the GPUs into groups a scheduler can match
// on (the NVLink island: GPUs that reach each other over NVLink; the PCIe switch where it
// differs from the root; the all-to-all linked sets of a partial mesh), each named by the
// hardware (its lowest PCI bus ID, or a hash of its members' bus IDs), so a restart names them
// the same. Order is the order to publish GPUs in for an allocator that takes the first that
// fit: GPUs on no island first, then islands from the smallest, each together. The root
// package's gpudra.WithTopology publishes all of it.
//
// BestSet chooses n GPUs with the best interconnect among candidates: the most NVLinks, then the
// tightest PCIe paths, then the fewest NUMA nodes, with deterministic tie-breaking.
//
// Neither package imports the gpu package; gpu/gputest machines model every NVML call
// nvmltopology makes.
package topology
