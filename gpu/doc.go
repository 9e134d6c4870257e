// Package gpu holds what NVML enumeration finds on a node as plain Go values (Inventory, GPU,
// MIGDevice, MIGGeometry, DeviceError), with no Kubernetes types, and the small conversions
// between NVML's spellings and canonical ones (CanonicalPCIBusID, NormalizeDriverVersion,
// CUDADriverVersion).
//
// The package does not use NVML and builds without cgo, so a program that only reads or
// publishes inventories (a controller, a cluster autoscaler's template, a scheduler simulation)
// can import it. The enumeration itself lives in gpu/nvmlgpu: Open or OpenReal initializes NVML
// (a gpu/gputest fake machine, or the host's libnvidia-ml.so.1, found in a driver root) and
// Enumerate reads every GPU and existing MIG device into an Inventory.
//
// Enumeration reports per GPU its index, minor, UUID, product name, brand, architecture name,
// compute capability and driver versions as semantic versions, memory, SM count, canonical PCI
// bus ID, NUMA node, and MIG capability and mode. Compute capability 8.0 is necessary but not
// sufficient for MIG (A10G, L4 and T4 have none), so capability is what GetMigMode answers. MIG
// devices are named from the NVML profile Id (not the enum) through the mig package's catalog.
//
// A GPU that fails mid-enumeration yields a *DeviceError naming its index, the NVML call and
// the NVML error; nvmlgpu.SkipFailedGPUs decides whether enumeration fails or skips the GPU and
// records the error in Inventory.Errors.
package gpu
