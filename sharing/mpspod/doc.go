// Package mpspod runs each MPS control daemon of package sharing in a Pod of its own on the
// node, outside the kubelet plugin's pod, so that restarting the plugin (a crash, a rolling
// update of its DaemonSet) leaves the daemons and the workloads using them running.
//
// Daemons implements sharing.MPSDaemons with a client-go kubernetes.Interface:
//
//   - Start creates the daemon's pipe, log and shm directories under the MPS root, mounts the
//     shm tmpfs on the host (the plugin's MPS root must propagate mounts to the host:
//     mountPropagation Bidirectional) and creates a Pod in the driver's namespace named after
//     the daemon ID and the node (PodName), pinned to the node (spec.nodeName), restartPolicy
//     Always, tolerating every taint, with the plugin's image and priority class, on the host's
//     network (it uses unix sockets only; no dependency on the pod network). The pod mounts the
//     daemon's directory at its host path (HostToContainer, so that it sees the tmpfs) and the
//     driver root read-only at /driver-root, and runs the plugin's daemon command with the
//     daemon's spec. A pod of that name that exists already is adopted: the name depends on the
//     daemon ID and the node only, so a plugin killed between creating the pod and
//     checkpointing the claim finds it again, on a retried prepare (adopt) as on the undo of
//     the claim's recorded plan (delete).
//   - Ready waits until the control socket, which the plugin sees at the same host path,
//     accepts and the pod's command has applied the daemon's limits (ReadyFile): the pod's
//     workload containers are started only after that.
//   - Running probes the control socket.
//   - Stop deletes the pod (its command asks the daemon to quit on SIGTERM), waits until the
//     pod and the control socket are gone, unmounts the tmpfs and removes the directories.
//
// The pod's command calls Run with a Daemon: Control runs nvidia-cuda-mps-control -f of the
// driver root (through the root's own loader, sharing.DriverRootDir.Command) and sends it
// commands on its standard input; FakeControl, for fake machines and tests, is a control daemon
// in Go that records the commands it receives (CommandsFile).
//
// # Limits are the daemon's
//
// Run sends the daemon's limits (sharing.MPSDaemonSpec.DefaultCommands:
// set_default_active_thread_percentage and set_default_device_pinned_mem_limit) before it
// reports ready, so before the first client connects and the daemon spawns its server: NVIDIA
// documents that a set_default_* command given while a server runs only affects the next
// server, and that a client's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE can only lower the daemon's
// setting. The limits of a claim's own daemon are thus enforced by the daemon, not by the
// workload's environment (see package sharing, "MPS limits").
//
// # Permissions
//
// The plugin's service account needs create, get, list and delete on pods in the driver's
// namespace (a Role, not a ClusterRole); daemon pods get no API token.
package mpspod
