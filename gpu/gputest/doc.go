// Package gputest provides fake NVML machines for testing GPU drivers without a GPU.
//
// New returns a *Machine implementing nvml.Interface for one of the machines Machines lists:
// DGX A100 (40GB and 80GB), DGX H100, DGX H200, DGX B200, a 4×A30 server, a 4×RTX PRO 6000
// Blackwell server, an 8×L4 server, a 4×A10G cloud VM and a GB200 NVL4 board. Each GPU reports a
// realistic product name, a UUID that is stable per machine and index, DGX-like PCI bus IDs, PCI
// device ids, minor numbers, memory, SM counts, brand, architecture, compute capability, NUMA node, PCIe/NVLink topology and, on
// GB200, an NVLink fabric clique.
//
// The machines build on go-nvml's pkg/nvml/mock types but behave like the hardware where those
// mocks do not. MIG geometry comes from nvidia-smi output recorded on real GPUs (Recordings; the
// printouts directory's README names every source) wherever a recording exists, and from the
// gpudra mig catalog only for what no recording covers, so a wrong catalog entry is caught by the
// catalog's tests instead of being mirrored; Machine.MIGModel says per field which values are
// recorded and which inferred. GPU-instance profile Ids differ from the profile enums (1g.5gb is
// Id 19 on an A100); placements are the real ones (a 3g instance covers 4 memory slices, an RTX
// PRO 6000 counts 12 placement units); overlapping GPU instances and instances beyond a profile's
// count fail with ERROR_INSUFFICIENT_RESOURCES; MIG device handles, remaining capacity and
// lookups by id work; GPUs without MIG answer ERROR_NOT_SUPPORTED to MIG calls; SetMigMode with
// instances present fails with ERROR_IN_USE. Methods the fake does not model answer
// ERROR_NOT_SUPPORTED rather than panicking.
//
// Options start GPUs with MIG layouts (WithMIG, WithMIGAll) or in a mig-parted configuration by
// name or file (WithMIGConfig, WithMIGConfigFile), change what a MIG profile reports
// (WithMIGProfileEdit, for code that must follow the device rather than the catalog), change the
// driver and CUDA versions, and inject NVML failures on the Nth call of any method (WithFault,
// WithFaultAfter); Calls counts calls per method. WithFabric, WithGPUFabric and SetFabric set what
// a GB200's GPUs report from GetGpuFabricInfo (cluster, clique, registration state and status);
// NVLDomain lays out a multi-node NVLink domain like an NVL72 rack (18 gb200-nvl4 trays in two
// cliques by default) as node names with the options that make each node's machine. InjectXID and InjectGPULost deliver events through NVML event sets.
// A Machine is safe for concurrent use.
//
// PCIHost is a fake host for PCI driver binding (package vfio): a sysfs, /dev/vfio and /proc tree
// in a directory, whose driver_override, unbind, bind and drivers_probe files react to writes as
// the kernel does; PassthroughGPU describes a GPU with its audio function in one IOMMU group, and
// FailWrite injects a failed write.
//
// NotSupported turns go-nvml's own mock servers (pkg/nvml/mock/dgxa100 and the like), which
// panic on every method they do not implement, into an NVML that answers ERROR_NOT_SUPPORTED
// there as the real library does: a second source of fakes, written by NVIDIA rather than from
// gpudra's catalog (draplugintest.WithNVML builds a test node on one).
package gputest
