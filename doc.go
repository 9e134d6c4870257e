// Package gpudra is a software development kit for Kubernetes Dynamic Resource Allocation (DRA)
// drivers for GPUs, and the composition layer of the packages below it.
//
// The sub-packages each own one concept and can be used alone:
//
//   - gpu enumerates GPUs and MIG devices through NVML into plain Go values; gpu/gputest provides
//     fake NVML machines (DGX A100/H100/H200/B200, A30, L4, A10G, GB200) for tests.
//   - mig knows MIG geometry without hardware: profiles, per-model catalog, layout validation and
//     enumeration, mig-parted configs, a placement planner, and a Manager that creates and
//     destroys instances through NVML with rollback.
//   - sharing decodes the resource.nvidia.com/v1beta1 opaque configs and turns exclusive,
//     time-slicing and MPS strategies into container edits and host actions.
//   - cdi generates, validates, writes and removes per-claim CDI specs.
//
// This package builds what a driver publishes — ResourceSlices (full GPUs, static MIG devices,
// dynamic MIG partitions with shared counters, consumable memory) and the DeviceClasses that
// select them — with the attribute, capacity and naming contract that manifests written for
// NVIDIA's DRA driver rely on: driver gpu.nvidia.com, one pool per node, device names gpu-<minor>
// and gpu-<minor>-mig-<profile>-<profileID>-<placementStart>.
//
// The reference driver in examples/gpu-dra-driver assembles all of it.
package gpudra
