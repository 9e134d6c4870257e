// Package gpu enumerates NVIDIA GPUs and their existing MIG devices through NVML into plain Go
// values (Inventory, GPU, MIGDevice), with no Kubernetes types.
//
// The NVML lifecycle belongs to the caller: Open (any nvml.Interface, e.g. a gpu/gputest fake
// machine) or OpenReal (the host's libnvidia-ml.so.1) initializes NVML and returns a Session
// whose Close shuts it down. Enumerate works on any initialized nvml.Interface.
//
// A driver installed elsewhere than "/" (the host's driver root mounted into a plugin's
// container) is loaded with OpenReal(WithDriverRoot(root)): FindLibrary finds libnvidia-ml.so.1
// in the root's library directories, resolving symbolic links inside the root, and NVML is
// loaded by that absolute path. The root's other libraries never reach this process: pointing
// LD_LIBRARY_PATH at them would load the root's C library with this process's dynamic loader,
// which kills the process when the two glibc versions differ.
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
