// Package exclusive is the kubelet-plugin core for drivers of exclusively allocated devices of
// any kind: an accelerator, an FPGA, a NIC, one device per request. The driver author writes a
// Driver (list the node's devices; prepare one device for a claim and say which container edits
// give a container the device; undo that), and the Plugin does everything else:
//
//   - kubelet registration and the DRA gRPC service (k8s.io/dynamic-resource-allocation's
//     kubeletplugin helper), ResourceSlices for the node's pool within the API limits
//     (package resourcepool);
//   - a crash-safe checkpoint: the claim's devices are recorded before the driver is called,
//     the driver's container edits after, and the claim is completed only once its CDI spec is
//     written; a failing step undoes the attempt, so a failed prepare leaves no spec and no
//     entry behind;
//   - idempotent prepare (a prepared claim is answered from the checkpoint; one allocated other
//     devices since fails clearly) and unprepare (unknown claims succeed);
//   - one CDI spec per claim (package cdi), written atomically and removed on unprepare;
//   - filtering: results of other drivers are ignored; a device of this driver in another pool,
//     one the driver does not list, or one allocated twice fails the claim before anything is
//     done;
//   - per-device locks shared with a second plugin process during a rolling update;
//   - reconciliation at start: interrupted prepares undone, interrupted unprepares finished,
//     claims of an earlier boot unprepared, lost specs rewritten, orphan specs removed, and,
//     when the checkpoint was lost, claims adopted from their specs rather than destroyed.
//
// It imports nothing of NVML and builds with CGO_ENABLED=0; package draplugin is the GPU
// counterpart, and both share their machinery and their test hooks (package
// draplugin/testhooks). Health monitoring is not offered: WatchHealthStatus answers
// kubeletplugin.ErrHealthNotSupported.
//
// # Writing a driver
//
//	type accelDriver struct{}
//
//	func (accelDriver) Devices(ctx context.Context) ([]resourceapi.Device, error) { ... } // accel-0, accel-1, ...
//	func (accelDriver) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim, device string) (specs.ContainerEdits, error) {
//		return specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/" + device}}}, nil
//	}
//	func (accelDriver) Unprepare(ctx context.Context, claimUID types.UID, device string) error { return nil }
//
//	writer, err := cdi.NewWriter(cdi.WithWriterKind("accel.example.com", "claim"))
//	plugin, err := exclusive.New(ctx, exclusive.Config{
//		DriverName: "accel.example.com", NodeName: node, Driver: accelDriver{},
//		StateDir: "/var/lib/kubelet/plugins/accel.example.com", CDIWriter: writer,
//	})
//	report, err := plugin.Start(ctx, exclusive.StartConfig{KubeClient: client})
//	defer plugin.Stop()
//	<-ctx.Done() // or plugin.Done(): a fatal error of the kubelet-plugin helper
//
// # Testing a driver
//
// Package draplugin/exclusive/exclusivetest is a fake node for a driver's tests: it lays out
// the plugin's directories, serves the plugin on its real sockets, registers a fake kubelet
// through the registration socket and prepares claims allocated by the scheduler's allocator
// through the DRA socket, all without cgo.
//
// examples/accel-dra-driver is a complete driver built this way.
package exclusive
