// Package cdi generates, validates, writes, lists and removes the Container Device Interface
// (CDI) specs through which a container runtime gives a container its GPUs.
//
// # Pieces
//
//   - DriverRoot is a read-only view of the node's NVIDIA driver installation. HostRoot is the
//     real one, for a driver installed at "/" or in a driver container ("/run/nvidia/driver"),
//     with separate dev, proc and host-side roots when the plugin sees them at other paths.
//     cdi/cditest lays out a fake one in a directory (for tests, demos and trials).
//   - Discover reads the driver version and finds the driver libraries (lib*.so.<version>),
//     the utility and MPS binaries and the GSP firmware: an Installation. Device nodes and MIG
//     capabilities (nvidia-caps major from /proc/devices, minors from
//     /proc/driver/nvidia-caps/mig-minors) are read on each use, never cached.
//   - Generator turns the devices of one claim (ClaimDevices) into one transient spec of kind
//     k8s.gpu.nvidia.com/claim whose devices are named "<claimUID>-<device>", so the IDs the
//     kubelet passes to the runtime are "k8s.gpu.nvidia.com/claim=<claimUID>-<device>".
//   - NewClaimSpec is the same for devices of any kind: the caller gives each device's edits
//     (an accelerator's /dev node, say) and a kind such as example.com/accel; Generator uses it
//     for GPUs.
//   - Writer stores each claim's spec atomically as
//     "<dir>/k8s.gpu.nvidia.com-claim_<claimUID>.json" (mode 0644), removes it, lists the
//     claims that have one and prunes those no longer prepared.
//
// # Spec content
//
// The spec-level edits, which a container gets once whichever devices of the claim it uses,
// hold nvidiactl plus nvidia-uvm, nvidia-uvm-tools and nvidia-modeset when present, read-only
// mounts of the driver files, optional nvidia-cdi-hook hooks (WithHooks), the environment entry
// NVIDIA_VISIBLE_DEVICES=void, and the claim's extra edits. Each device holds /dev/nvidia<minor>,
// for a MIG device also its GPU-instance and compute-instance capability nodes, and its extra
// edits (for example the MPS environment and pipe-directory mount built by the sharing package).
//
// NVIDIA_VISIBLE_DEVICES=void is set by default (WithVisibleDevicesVoid(false) turns it off):
// CUDA images set NVIDIA_VISIBLE_DEVICES=all, and on a node whose runtime still runs
// nvidia-container-runtime's legacy hook that would add every GPU of the node to the container.
// The CDI entry replaces the image's value, so the container gets exactly the claim's devices.
//
// Every device node is fully specified (type, major, minor, and mode when known), so the
// runtime does not need to stat the host node, and MIG capability nodes work before the host
// has created them. A missing /dev/nvidia<N> or /dev/nvidiactl fails generation instead of
// producing a spec that silently lacks the device.
//
// The spec's cdiVersion is the minimum its content needs (specs.MinimumRequiredVersion;
// "0.5.0" in practice, because claim UIDs may start with a digit), and Validate applies the CDI
// library's own rules before anything is written.
//
// # Use in a kubelet plugin
//
//	root, _ := cdi.NewHostRoot("/")
//	inst, _ := cdi.Discover(root)
//	gen, _ := cdi.NewGenerator(inst)
//	w, _ := cdi.NewWriter(cdi.WithSpecDir(cdi.DefaultSpecDir))
//
//	// start-up: drop leftovers of a crash, then reconcile
//	w.CleanTemp()
//	w.Prune(preparedUIDs) // specs of claims the checkpoint no longer holds (w.List shows all)
//
//	// NodePrepareResources
//	cs, _ := gen.Generate(cdi.ClaimDevices{ClaimUID: uid, Devices: devices})
//	w.Write(cs)        // then return cs.DeviceIDs[device] as the device's CDI ID
//
//	// NodeUnprepareResources
//	w.Remove(uid)
package cdi
