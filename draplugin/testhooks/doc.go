// Package testhooks declares the test hooks of the kubelet plugins of package draplugin (GPUs)
// and package draplugin/exclusive (exclusively allocated devices of any kind): both plugins'
// Config.TestHooks is a Hooks, and both pass the CrashPoints declared here. It imports nothing
// of NVML and builds without cgo.
//
// # Crash points
//
// AfterStep is called at every CrashPoint of a prepare or an unprepare; an error it returns
// stops the operation at once, without any cleanup, as a crash of the process would. A new
// plugin on the same state directory then sees what a restarted process would. The points
// shared by both plugins are CrashAfterPrepareStarted, CrashAfterCDIWritten,
// CrashAfterPrepareCompleted, CrashAfterUnprepareStarted, CrashAfterCDIRemoved and
// CrashAfterUnprepareCompleted; the others say which plugin passes them.
//
// CrashAt returns a Crasher whose Hooks stop the operations of one claim at its n-th crash
// point and record the points seen, the usual way to write a crash test:
//
//	crash := testhooks.CrashAt(claim.UID, 2)
//	cfg.TestHooks = crash.Hooks()
//	_, err := plugin.PrepareResourceClaims(ctx, claims) // the claim's result wraps testhooks.ErrCrash
//
// # Durability
//
// Synced reports every fsync; CheckpointWrite fails checkpoint writes as a full disk would.
// Production drivers leave Hooks empty.
package testhooks
