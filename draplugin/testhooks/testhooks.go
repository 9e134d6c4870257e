package testhooks

import (
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Hooks let tests stop a plugin where a crash could and see what it syncs. They exist for
// tests only; production drivers leave them empty.
type Hooks struct {
	// AfterStep, when set, is called at every CrashPoint of prepare and unprepare. An error stops
	// the operation at once, without any cleanup, as a crash would.
	AfterStep func(point CrashPoint, claimUID types.UID) error
	// Synced, when set, is called after every fsync the plugin makes, with the file or directory
	// synced: tests count what each operation pays for durability, or record what a power loss
	// would leave.
	Synced func(path string)
	// CheckpointWrite, when set, is called before every write of the checkpoint file; an error
	// fails that write as a full disk would (unlike AfterStep, not a crash: the plugin handles
	// it as any failed write, rolling back a prepare).
	CheckpointWrite func(path string) error
}

// CrashPoint names a point between two steps of prepare or unprepare at which a test can stop
// the plugin as a crash would (Hooks.AfterStep).
type CrashPoint string

// The crash points, in the order prepare and unprepare pass them. Points without a plugin named
// are passed by both.
const (
	// CrashAfterPrepareStarted: the claim's intent is recorded (PrepareStarted), nothing done.
	// The GPU plugin records it only when the prepare creates MIG instances or changes host
	// settings.
	CrashAfterPrepareStarted CrashPoint = "prepare-started"
	// CrashAfterMIGCreated (GPU plugin): one dynamic MIG instance was created (once per
	// created instance).
	CrashAfterMIGCreated CrashPoint = "mig-created"
	// CrashAfterSharingApplied (GPU plugin): the sharing engine made its host changes.
	CrashAfterSharingApplied CrashPoint = "sharing-applied"
	// CrashAfterDevicePrepared (exclusive plugin): Driver.Prepare succeeded for one device
	// (once per device).
	CrashAfterDevicePrepared CrashPoint = "device-prepared"
	// CrashAfterCDIWritten: the claim's CDI spec was written.
	CrashAfterCDIWritten CrashPoint = "cdi-written"
	// CrashAfterPrepareCompleted: the claim was recorded as PrepareCompleted.
	CrashAfterPrepareCompleted CrashPoint = "prepare-completed"
	// CrashAfterUnprepareStarted: the claim was recorded as UnprepareStarted.
	CrashAfterUnprepareStarted CrashPoint = "unprepare-started"
	// CrashAfterCDIRemoved: the claim's CDI spec was removed (in the exclusive plugin, also
	// when a prepare is undone).
	CrashAfterCDIRemoved CrashPoint = "cdi-removed"
	// CrashAfterSharingUndone (GPU plugin): the claim's host changes were undone.
	CrashAfterSharingUndone CrashPoint = "sharing-undone"
	// CrashAfterMIGDestroyed (GPU plugin): one MIG instance the plugin had created was
	// destroyed.
	CrashAfterMIGDestroyed CrashPoint = "mig-destroyed"
	// CrashAfterDeviceUnprepared (exclusive plugin): Driver.Unprepare succeeded for one device
	// (once per device).
	CrashAfterDeviceUnprepared CrashPoint = "device-unprepared"
	// CrashAfterVFIOBound (GPU plugin): one GPU passed through to a virtual machine was bound
	// to vfio-pci (once per device).
	CrashAfterVFIOBound CrashPoint = "vfio-bound"
	// CrashAfterVFIOUnbound (GPU plugin): one GPU was given back to its driver from vfio-pci
	// (once per device, in unprepare and in rollback).
	CrashAfterVFIOUnbound CrashPoint = "vfio-unbound"
	// CrashAfterUnprepareCompleted: the claim was removed from the checkpoint.
	CrashAfterUnprepareCompleted CrashPoint = "unprepare-completed"
)

// ErrCrash is the error a Crasher's hook stops an operation with.
var ErrCrash = errors.New("testhooks: simulated crash")

// Crasher stops the operations of one claim at its n-th crash point, once armed. Its Hooks go
// into the plugin's Config.TestHooks. It records the crash points it saw.
type Crasher struct {
	uid types.UID
	n   int

	mu    sync.Mutex
	armed bool
	count int
	seen  []CrashPoint
}

// CrashAt returns a Crasher for the n-th (1-based) crash point of claim uid; n < 1 never
// crashes (use it to record the points). It starts armed.
func CrashAt(uid types.UID, n int) *Crasher { return &Crasher{uid: uid, n: n, armed: true} }

// Arm starts (or, with false, stops) counting crash points.
func (c *Crasher) Arm(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = on
}

// Seen returns the crash points seen while armed.
func (c *Crasher) Seen() []CrashPoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]CrashPoint(nil), c.seen...)
}

// Reset forgets the crash points seen and restarts counting.
func (c *Crasher) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen, c.count = nil, 0
}

// Hooks returns the hooks to put into the plugin's Config.TestHooks.
func (c *Crasher) Hooks() Hooks {
	return Hooks{AfterStep: func(point CrashPoint, uid types.UID) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if uid != c.uid || !c.armed {
			return nil
		}
		c.count++
		c.seen = append(c.seen, point)
		if c.count == c.n {
			return fmt.Errorf("%w after %s", ErrCrash, point)
		}
		return nil
	}}
}
