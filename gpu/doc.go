// Package gpu enumerates NVIDIA GPUs and their existing MIG devices through NVML into plain Go
// values (Inventory, GPU, MIGDevice), with no Kubernetes types.
//
// The NVML lifecycle belongs to the caller: Open (any nvml.Interface, e.g. a gpu/gputest fake
// machine) or OpenReal (the host's libnvidia-ml.so.1) initializes NVML and returns a Session
// whose Close shuts it down. Enumerate works on any initialized nvml.Interface.
//
// Enumeration reports per GPU its index, minor, UUID, product name, brand, architecture name,
// compute capability and driver versions as semantic versions, memory, SM count, canonical PCI
// bus ID, NUMA node, and MIG capability and mode. Compute capability 8.0 is necessary but not
// sufficient for MIG (A10G, L4 and T4 have none), so capability is what GetMigMode answers. MIG
// devices are named from the NVML profile Id (not the enum) through the mig package's catalog.
//
// A GPU that fails mid-enumeration yields a *DeviceError naming its index, the NVML call and
// the NVML error; SkipFailedGPUs decides whether Enumerate fails or skips the GPU and records
// the error in Inventory.Errors.
package gpu
