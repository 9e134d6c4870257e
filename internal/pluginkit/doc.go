// Package pluginkit holds the node-runtime pieces that every kind of kubelet DRA plugin of this
// module shares, so that each is written once: the GPU plugin (package draplugin) and the plugin
// for exclusively allocated devices of any kind (package draplugin/exclusive) both use it. It
// imports nothing of NVML.
//
// # Pieces
//
//   - Locks: per-device locks, within the process and across the processes of a rolling update.
//   - Fatal: the kubelet-plugin helper's error handling (recoverable errors logged, the first
//     fatal one kept and signalled).
//   - Endpoint and HelperOptions: where and how the helper serves; Concurrently runs one claim
//     per goroutine; DriverResources hands a resourcepool.Pool to the helper; PublishFirst
//     creates a fresh node's first ResourceSlices without waiting for the helper's controller.
//   - ClaimRef, SameAllocation, CompleteRecovered, ShareIDs and Result: a claim's checkpoint
//     entry against its allocation, and the answer to kubelet rebuilt from the entry.
//   - OpenStore, Syncer and the durability of each kind of write.
//   - Reconcile runs a plugin's reconciliation steps under its locks; ReconcileSpecs is the
//     step both plugins share.
//
// The common path of a plugin's prepare:
//
//	unlock, err := locks.Lock(deviceKeys)
//	defer unlock()
//	if st, ok := store.Get(uid); ok && st.Phase == checkpoint.PrepareCompleted {
//		if err := pluginkit.SameAllocation(st, results); err != nil { ... }
//		return pluginkit.Result(st, pluginkit.ShareIDs(claim, driverName)), nil
//	}
package pluginkit
