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
//     slice value on full GPUs; MPS gets a control daemon with its own pipe, log and shm
//     directories, and containers get CUDA_MPS_PIPE_DIRECTORY,
//     CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT plus mounts of the
//     pipe and shm directories; a device allocated a fraction of its memory (consumed capacity
//     "memory") runs under MPS with its pinned memory limit set to that fraction;
//   - prepares and undoes (Manager.Prepare, Manager.Undo): host changes go through the
//     TimeSlicer, ComputeModeSetter and MPSDaemons interfaces, each recorded with the value it
//     replaced in a JSON-serializable Record that Undo reverses exactly;
//   - refuses conflicting claims (Registry): two claims on one device unless both allocations
//     are shared, and then only with the same strategy and time slice;
//   - supervises and cleans MPS daemons (Manager.SuperviseMPSDaemons, Manager.CleanMPSDirs).
//
// Real host implementations are NvidiaSMI (time slices), NVMLComputeMode (compute modes) and
// two MPSDaemons: MPSControl runs nvidia-cuda-mps-control -d in the calling process's
// container (with a TmpfsMounter), and package sharing/mpspod runs each daemon in a Pod of its
// own on the node, which outlives the plugin's pod; sharing/sharingtest has FakeHost, in memory
// or persisted to a file.
//
// # Preparing a claim
//
//	m := sharing.NewManager("gpu.nvidia.com",
//		sharing.WithTimeSlicer(sharing.NewNvidiaSMI()),
//		sharing.WithComputeModeSetter(sharing.NewNVMLComputeMode(lib)),
//		sharing.WithMPSDaemons(sharing.NewMPSControl()))
//	_ = m.Restore(checkpointed)                  // at start-up
//	rec, err := m.Prepare(ctx, claim, lookup)
//	if rec != nil {
//		checkpoint(rec) // also when err != nil: rec is then a partial record to Undo later
//	}
//	...
//	err = m.Undo(ctx, rec)                       // on unprepare
//
// # Failures and concurrency
//
// A Prepare that fails undoes what it did, even when the caller's context is cancelled; what
// it cannot undo it returns as a partial record (Record.Partial) and keeps registered until
// Undo succeeds. An Undo that fails returns an *UndoError whose Left is the record of what is
// still on the host; checkpoint it in place of the record, so that a restart or another
// process sees only that. A Manager is safe for concurrent use; host actions are serialized per
// physical GPU (a MIG device counts as its GPU), so a slow MPS start on one GPU does not
// delay claims on another.
//
// # MPS daemons and isolation
//
// Devices that a claim has to itself (no share ID) get a daemon of the claim's own, named
// after the claim UID (which Prepare and Plan require to be a canonical UUID, so that it stays
// one directory under the MPS root): its pipe directory and its shm tmpfs are mounted into
// that claim's containers only. A device allocated with a share ID gets the device's shared
// daemon: MPS runs one control daemon per GPU, so claims that share a device necessarily share
// its daemon, its pipe directory and its shm directory, whatever their namespaces. The isolation
// boundary of MPS sharing is therefore the claim for unshared devices and the device for shared
// ones; give tenants that must not see each other's MPS clients different devices.
//
// Each daemon's directories live under the MPS root (WithMPSRoot) as <id>/{pipe,log,shm}; the
// shm directory is a tmpfs mounted by the MPSDaemons with the manager's size (WithMPSShmSize,
// default 1 GiB), so clients cannot fill the kubelet disk, and unmounted on Stop. Daemons can
// crash, and MPSControl's die with the plugin's container (a restart, a rolling update: the MPS
// servers of running pods go with them; mpspod's do not): SuperviseMPSDaemons, called at
// start-up and periodically, restarts the daemons of prepared claims that do not run, and
// CleanMPSDirs removes directories (and tmpfs mounts, and with mpspod the daemon pods) that no
// registered claim uses and whose daemon does not run, such as those of claims forgotten at a
// reboot. A daemon that runs is never stopped for want of a record.
//
// # MPS limits: the daemon's, not the client's
//
// A daemon applies its spec's limits (MPSDaemonSpec.DefaultCommands:
// set_default_active_thread_percentage and set_default_device_pinned_mem_limit per device
// ordinal) before Start and Ready return, so before any client connects. NVIDIA's MPS
// documentation (docs.nvidia.com/deploy/mps, "Legacy MPS v2 Interface" and "Appendix:
// Environment Variables") says that set_default_active_thread_percentage only affects the
// next server when one is spawned already, and that a client's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
// can only lower the daemon's setting, never raise it. set_default_device_pinned_mem_limit is
// treated the same way (a default for the servers spawned after it). Whether a client's
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT could raise the daemon's limit is not relied on: the pinned
// memory limit of a claim's own daemon (its mpsConfig limits) is set on the daemon, and the
// containers' environment does not carry it, so nothing a tenant can edit bears on it.
//
// A shared daemon is the exception: claims allocated a share of a device (consumable
// capacity "memory", share IDs) use the device's one daemon and its one server, whose default
// limits apply to every client alike, while their shares differ. Their share's limit is still
// only CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in the containers' environment, which a tenant that
// controls its environment can change; a device whose tenants must not exceed their shares
// needs a daemon and server per claim (not done yet).
package sharing
