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
// Every claim with MPS devices gets a control daemon of its own, named after the claim UID
// (which Prepare and Plan require to be a canonical UUID, so that it stays one directory under
// the MPS root), whether it has its devices to itself or was allocated a share of them (a share
// ID, from consumable capacity): its pipe directory and its shm tmpfs are mounted into that
// claim's containers only, and its MPS server serves that claim's clients only. The isolation
// boundary of MPS sharing is the claim. A device the claim has to itself is set to compute mode
// EXCLUSIVE_PROCESS (the claim's server is its only context); a device shared by several claims
// stays in (or is set to) DEFAULT, so that each claim's server holds a context of its own beside
// the others': the servers of different claims time-slice the GPU between them, while the
// clients of one claim run concurrently. Records of earlier versions, whose one daemon per
// device served every share of it in EXCLUSIVE_PROCESS, are undone as they were made; a new
// share of such a device is refused, naming the claim that holds it, until that claim is gone.
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
// ordinal) before Start and Ready return, so before any client connects and before its server
// is spawned. NVIDIA's MPS documentation (docs.nvidia.com/deploy/mps, "Legacy MPS v2 Interface"
// and "Appendix: Environment Variables") says that set_default_active_thread_percentage only
// affects the next server when one is spawned already, and that a client's
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE can only lower the daemon's setting, never raise it.
// set_default_device_pinned_mem_limit is treated the same way (a default for the servers
// spawned after it). Whether a client's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT could raise the
// daemon's limit is not relied on: a claim's pinned memory limits — its mpsConfig limits, or the
// memory it was allocated of a shared device, summed over its shares of that device — are set
// on the claim's daemon only, and the containers' environment does not carry them, so nothing a
// tenant can edit bears on its share. (That the servers of several daemons share one GPU in
// compute mode DEFAULT, and that each enforces its own daemon's limit, is NVIDIA's documented
// model of several control daemons with their own pipe directories; it has not been checked on
// a GPU by this project yet.)
package sharing
