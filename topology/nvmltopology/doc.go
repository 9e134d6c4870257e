// Package nvmltopology reads a node's GPU interconnect through NVML into the plain values of
// package topology: Discover returns a *topology.Topology (NVLinks, direct or through
// NVSwitches; the PCIe path between every pair; each GPU's NUMA node and PCIe root complex; the
// NVLink domains of GB200-class systems). It uses go-nvml and so needs cgo; package topology,
// which groups, ranks and renders a Topology, does not.
//
// # What Discover reads
//
// Per GPU: the PCI bus ID, the NUMA node, every active NVLink and its far end, and the NVLink
// fabric membership; per pair: the PCIe common ancestor and the P2P read status. A call that
// answers ERROR_NOT_SUPPORTED leaves the value unknown; any other failure is an *Error naming the
// GPU and the NVML call (errors.Is(err, nvml.ERROR_GPU_IS_LOST) works on it).
//
// # PCIe roots
//
// PCIe roots follow the Kubernetes standard attribute resource.kubernetes.io/pcieRoot: they are
// read from sysfs (DefaultSysfsRoot; WithSysfsRoot for the host's sysfs mounted elsewhere) with
// k8s.io/dynamic-resource-allocation/deviceattribute, and derived from NVML's topology when sysfs
// does not know the device (WithoutSysfs: always), so fake machines and non-Linux hosts still get
// roots that group GPUs by host bridge.
//
//	topo, err := nvmltopology.Discover(sess.Interface()) // an initialized NVML (gpu/nvmlgpu)
//	b := gpudra.NewBuilder(gpudra.WithTopology(topo))
//	best, err := topology.BestSet(topo, 2, free)
package nvmltopology
