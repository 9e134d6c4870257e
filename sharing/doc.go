// Package sharing turns the opaque configuration of an allocated ResourceClaim into a GPU
// sharing setup: which strategy each device runs under (Exclusive, TimeSlicing or MPS), the
// container edits the device's CDI spec must carry, and the host changes that make it so.
//
// The configuration API (resource.nvidia.com/v1beta1 GpuConfig and MigDeviceConfig) lives in
// package sharing/v1beta1. This package:
//
//   - resolves, per allocated device of the driver, the winning config: DeviceClass configs
//     before claim configs, the last matching entry wins, a config for request "req" applies to
//     its subrequests "req/sub" (Manager.Resolve);
//   - plans the strategy (Manager.Plan): TimeSlicing maps the interval to the nvidia-smi time
//     slice value on full GPUs; MPS gets one control daemon per claim with per-claim pipe, log
//     and shm directories, and containers get CUDA_MPS_PIPE_DIRECTORY,
//     CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT plus mounts of the
//     pipe and shm directories; a device allocated a fraction of its memory (consumed capacity
//     "memory") runs under MPS with its pinned memory limit set to that fraction;
//   - prepares and undoes (Manager.Prepare, Manager.Undo): host changes go through the
//     TimeSlicer, ComputeModeSetter and MPSDaemons interfaces, each recorded with the value it
//     replaced in a JSON-serializable Record that Undo reverses exactly;
//   - refuses conflicting claims (Registry): two claims on one device unless both allocations
//     are shared, and then only with the same strategy and time slice.
//
// Real host implementations are NvidiaSMI (time slices), NVMLComputeMode (compute modes) and
// MPSControl (nvidia-cuda-mps-control); sharing/sharingtest has an in-memory FakeHost.
package sharing
