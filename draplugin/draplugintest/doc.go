// Package draplugintest is a fake GPU node for testing drivers built on draplugin, in the
// spirit of controller-runtime's client/fake: it returns the production types (a real
// *draplugin.Plugin, real CDI specs on disk, a real gRPC kubelet conversation) over fakes of
// what the node would provide.
//
// # The node
//
// NewNode builds a Node from a gpu/gputest machine name: the fake NVML machine, a fake NVIDIA
// driver installation (device nodes and libraries as files, for CDI generation), an in-memory
// sharing host (time slices, compute modes, MPS daemons) and the plugin's state, CDI and MPS
// directories, all under one temporary directory. Node.NewPlugin starts a plugin on it; calling
// it again is a restart on the same state, machine and host, as after a crash. Node.Reboot
// simulates a reboot: new boot ID, MIG instances and host settings gone, the CDI tmpfs wiped.
//
// # Claims and kubelet
//
// Node.Allocate allocates a claim with the Kubernetes scheduler's allocator (package simulate)
// against the slices the node publishes. Prepare and Unprepare call a plugin (any
// kubeletplugin.DRAPlugin: draplugin's, draplugin/exclusive's, a driver's own) as the
// kubelet-plugin helper does; Node.Serve starts the plugin's real gRPC servers with a fake API
// client, and the returned Kubelet talks to them exactly as kubelet does (registration socket,
// GetInfo, then NodePrepareResources / NodeUnprepareResources). ConnectKubelet does the same
// for a plugin started elsewhere, for example a driver process in an end-to-end test.
//
// The kubelet and API-server fakes that are not GPU-specific live in package
// draplugin/kubelettest, which builds without cgo; Kubelet, ConnectKubelet, Prepare, Unprepare
// and UID are its, here so that a GPU driver's test needs one import. A driver for another kind
// of device is tested with package draplugin/exclusive/exclusivetest.
//
// Serve's fake API client is NewAPIClient: it answers discovery for resource.k8s.io/v1 and,
// like an API server with feature gates off (WithAPIFeaturesOff), drops the fields of those
// features from the ResourceSlices written to it, dry runs included (DropDisabledFields).
//
// # Crashes
//
// CrashAt (testhooks.CrashAt) returns test hooks that stop a prepare or unprepare at a chosen crash point, without
// any cleanup, as a crash would; a new plugin on the same Node then sees what a restarted
// process would.
//
// # What it does not model
//
// There is no API server: claims are not read from one (Serve's fake client holds the claims
// given to it) and published ResourceSlices are only recorded, minus the fields of disabled
// features; nothing is validated. The fake machine's MIG state and
// the fake host live in memory, so they survive a "restart" within one process but not a real
// process kill. CDI specs are checked by reading the files, not by a container runtime, and
// device nodes are plain files. Timing, NVML latencies and kernel behaviour (tmpfs, fsync) are
// not modelled.
//
// The common path:
//
//	node, err := draplugintest.NewNode("dgx-a100-40gb", draplugintest.WithDynamicMIG())
//	defer node.Close()
//	plugin, err := node.NewPlugin(ctx)
//	claim, err := node.Allocate(ctx, draplugintest.Claim("c", "mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'", ""))
//	devices, err := draplugintest.Prepare(ctx, plugin, claim)
package draplugintest
