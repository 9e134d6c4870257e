// Package exclusivetest is a fake node for testing a driver built on package
// draplugin/exclusive (an FPGA, a NIC, an accelerator: any device allocated whole, one claim at
// a time), in the spirit of controller-runtime's client/fake: it returns the production types
// (a real *exclusive.Plugin, real CDI specs and checkpoint on disk, a real gRPC kubelet
// conversation over unix sockets) over fakes of what the node and the cluster would provide.
// It imports nothing of NVML and builds with CGO_ENABLED=0.
//
// # The node
//
// NewNode lays out one node under a temporary directory: the plugin's state directory, the CDI
// spec directory, the plugin's socket directory, kubelet's registration directory (all
// created, as kubelet and the container runtime create them) and a boot ID file. Node.NewPlugin
// starts a plugin on it from an exclusive.Config that names the driver (DriverName, Driver):
// the node fills in the node name, directories, boot ID and a CDI writer of kind
// "<driver>/claim". Calling it again is a restart on the same state, as after a crash.
// Node.Reboot simulates a reboot: a new boot ID and the CDI directory wiped.
//
// # Kubelet and the API server
//
// Node.Serve starts the plugin as a driver's serve does (exclusive.Plugin.Start) on the node's
// directories, with a fake API client (kubelettest.NewFakeClient) holding the Node object, and
// registers a fake kubelet through the plugin's registration socket
// ("<RegistrarDir>/<driver>-reg.sock", kubelettest.RegistrationSocket). The returned Server
// prepares and unprepares claims through the DRA socket (NodePrepareResources,
// NodeUnprepareResources) exactly as kubelet does, storing them in the fake API server first,
// where the kubelet-plugin helper reads them. Server.ResourceSlices returns what the plugin
// published.
//
// Tests that need no sockets call the plugin as the kubelet-plugin helper does, with
// kubelettest.Prepare and kubelettest.Unprepare.
//
// # Claims
//
// Node.Allocate allocates a claim with the Kubernetes scheduler's allocator (package simulate)
// against the slices the plugin publishes, with DeviceClass(driverName): build the claim with
// kubelettest.Claim(name, driverName, celSelector).
//
// # Crashes
//
// testhooks.CrashAt returns hooks (exclusive.Config.TestHooks) that stop a prepare or an
// unprepare at a chosen crash point, without any cleanup, as a crash would; a new plugin on the
// same Node then sees what a restarted process would, and its Reconcile repairs the node. A
// real process kill needs a child process: Kill re-executes the test binary on a node
// directory (build the Node in it WithDir), SIGKILLs it at each crash point of a prepare and
// of an unprepare in turn (Kill.EveryCrashPoint), and hands each killed node to the test's
// check; Kill.Child, called first in TestMain, is the child's side.
//
// # What it does not model
//
// Only what a plugin process sees through files and sockets is modelled. The fake API server
// validates nothing and holds no DeviceClasses; the fake kubelet does not watch the
// registration directory, retry, or check pods. The driver's devices are whatever the test's
// Driver says: the node neither creates device nodes nor resets the driver's state on Reboot.
// CDI specs are checked by reading the files, not by a container runtime. Timing and kernel
// behaviour (tmpfs, fsync) are not modelled.
//
// The common path:
//
//	node, err := exclusivetest.NewNode()
//	defer node.Close()
//	plugin, err := node.NewPlugin(ctx, exclusive.Config{DriverName: "fpga.example.com", Driver: myDriver{}})
//	srv, err := node.Serve(ctx, plugin, exclusive.StartConfig{})
//	defer srv.Stop()
//	claim, err := node.Allocate(ctx, plugin, kubelettest.Claim("c", "fpga.example.com", ""))
//	resp, err := srv.Prepare(ctx, claim)
package exclusivetest
