// Package draplugin is the kubelet-plugin core of a GPU DRA driver: it prepares and unprepares
// the devices of ResourceClaims on a node, crash-safely, and publishes the node's ResourceSlices
// through the kubelet-plugin helper of k8s.io/dynamic-resource-allocation.
//
// A driver for another kind of device, allocated one claim at a time, uses package
// draplugin/exclusive instead: the same checkpoint, locks, CDI writing, reconciliation and
// kubelet registration, around three methods the driver author writes, and nothing of NVML.
// Both plugins take the test hooks of package draplugin/testhooks.
//
// # Prepare and unprepare
//
// A Plugin implements kubeletplugin.DRAPlugin. Preparing a claim runs these steps, each
// recorded in a checkpoint in the state directory before and after its side effects:
//
//  1. record the intent (phase PrepareStarted): devices, MIG instances to create, sharing plan;
//  2. create the dynamic MIG instances (MIGController);
//  3. make the sharing host changes and record them (SharingEngine: time slices, compute mode,
//     MPS daemons);
//  4. write the claim's CDI spec (package cdi);
//  5. record the claim as PrepareCompleted.
//
// A failing step undoes exactly what the attempt did and returns a *StepError that names the
// step and device. Prepare and unprepare are idempotent, serialized per physical GPU, and run
// in parallel across GPUs. Unprepare runs the steps in reverse.
//
// # Crashes, restarts and reboots
//
// Reconcile (Start calls it) repairs what a crash or a reboot left: it rolls back interrupted
// prepares, finishes interrupted unprepares, forgets the claims of an earlier boot (kubelet
// prepares them again), rewrites lost CDI specs and removes leaked instances and specs. Config.TestHooks
// (package draplugin/testhooks) lets tests stop the plugin at every crash point; package
// draplugintest builds a fake node to do so.
//
// Every record and CDI spec survives a crash of the process at no cost (a rename). A power
// loss is a reboot, which undoes what prepare did on the node, and after which Reconcile
// forgets every claim of the earlier boot, so neither prepare nor unprepare pays for an fsync
// (docs/reliability.md, "Durability"). Config.TestHooks.Synced reports every fsync.
//
// # Health
//
// NVML XID and GPU-lost events, and MarkUnhealthy, taint the devices of the GPU in the
// published slices and are reported through WatchHealthStatus; MarkHealthy removes the taints.
//
// # What the API server keeps
//
// An API server with a DRA feature gate off (or older than the feature) does not reject a
// ResourceSlice that uses it: it drops the feature's fields, so dynamic MIG partitions would be
// published without the counters that keep them apart. NegotiateFeatures asks the server (a
// dry-run create of probe slices) which optional features it keeps; Config.APIFeatures then
// makes the plugin publish only those, turning dynamic MIG, consumable memory or health taints
// off with one log line that says what and why:
//
//	features, err := draplugin.NegotiateFeatures(ctx, client, gpudra.DefaultDriverName, node)
//	plugin, err := draplugin.New(ctx, draplugin.Config{ /* ... */ APIFeatures: features})
//
// draplugintest.NewAPIClient is a fake API server with chosen gates off.
//
// # Configuration
//
// Config takes the slice builder's options (gpudra.Option) as the single source of what is
// published and prepared: driver name, dynamic MIG, consumable memory, taints. The common path:
//
//	plugin, err := draplugin.New(ctx, draplugin.Config{
//		NodeName: node, NVML: session.Interface(), StateDir: "/var/lib/kubelet/plugins/gpu.nvidia.com",
//		CDIGenerator: gen, CDIWriter: writer, Sharing: sharingManager,
//		SliceOptions: []gpudra.Option{gpudra.WithDynamicMIG(nil)},
//	})
//	report, err := plugin.Start(ctx, draplugin.StartConfig{KubeClient: client})
//	defer plugin.Stop()
package draplugin
