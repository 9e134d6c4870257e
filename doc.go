// Package gpudra is a software development kit for Kubernetes Dynamic Resource Allocation (DRA)
// drivers for GPUs. This package is the published contract: what the scheduler sees. It builds
// the ResourceSlices a driver publishes (full GPUs, static MIG devices, dynamic MIG partitions
// with shared counters, consumable memory) with the attribute, capacity and naming contract that
// manifests written for NVIDIA's DRA driver rely on: driver gpu.nvidia.com, one pool per node,
// device names gpu-<minor> and gpu-<minor>-mig-<profile>-<profileID>-<placementStart>. It does no
// I/O, links no gRPC, Prometheus or API client, and links no NVML: it builds with CGO_ENABLED=0,
// so a controller or a cluster autoscaler can import it.
//
// # Which package for which job
//
//   - gpudra (this package): device names, attributes, the slice Builder, ResourceSlices,
//     SliceTemplates (what a node of a GPU type publishes, for autoscalers).
//   - draplugin: the kubelet-plugin core of a node: crash-safe prepare/unprepare, checkpoint,
//     reconciliation, health taints, metrics; draplugin/draplugintest: a fake node for tests.
//   - selectors: CEL as the scheduler runs it, selector builders, DeviceClasses, lint, policy.
//   - simulate: allocate claims against slices offline with the scheduler's own allocator.
//   - gpu: the inventory as plain Go values; gpu/nvmlgpu: NVML sessions and enumeration into it;
//     gpu/gputest: fake NVML machines.
//   - mig: MIG profiles, geometry catalog, layout validation, mig-parted configs, planner;
//     mig/nvmlmig: a GPU's own MIG geometry, and instance listing and creation through NVML.
//   - sharing: the resource.nvidia.com/v1beta1 opaque configs; exclusive, time-slicing and MPS.
//   - deviceplugin: migrating from NVIDIA's device plugin: its config as DeviceClasses with
//     extendedResourceName, and detecting it on a node.
//   - cdi: per-claim CDI specs: generation, validation, writing, cleanup.
//   - resourcepool: the generic half of the slice builder: any kind of device into one pool's
//     slices within the API limits (Pool and Slice are its types).
//   - topology: NVLink/PCIe/NUMA links, PCIe roots, NVLink domains, best-connected GPU sets;
//     topology/nvmltopology: their discovery through NVML.
//
// Only the nvml… subpackages (and the packages that use them: gputest, draplugin, sharing) need
// NVML and cgo; this package, gpu, mig, topology, selectors and simulate do not.
//
// The reference driver in examples/gpu-dra-driver assembles all of it; docs/driver-authors.md in
// the repository builds a driver from these packages step by step.
//
// # Publish slices
//
//	inv, err := nvmlgpu.Enumerate(ctx, nvmlLib)
//	b := gpudra.NewBuilder(gpudra.WithDynamicMIG(nil))
//	pool, err := b.Build(nodeName, inv)
//	slices, err := gpudra.ResourceSlices(b.DriverName(), nodeName, pool) // complete objects
//
// With WithTopology(topo) (topo from nvmltopology.Discover) every device also names its NVLink
// island, NVLink fabric domain and PCIe switch (AttrNVLinkIsland, AttrNVLinkDomain,
// AttrPCIeSwitch) for matchAttribute constraints, and GPUs are published in an order that makes
// the scheduler's first fit keep whole islands free. WithoutFeatures leaves out the fields an
// API server with some DRA feature gates off would drop (draplugin.NegotiateFeatures asks it).
//
// # Serve a node
//
//	plugin, err := draplugin.New(ctx, draplugin.Config{
//		NodeName: nodeName, NVML: nvmlLib, StateDir: stateDir,
//		CDIGenerator: gen, CDIWriter: writer, SliceOptions: []gpudra.Option{gpudra.WithDynamicMIG(nil)},
//	})
//	report, err := plugin.Start(ctx, draplugin.StartConfig{KubeClient: client})
package gpudra
