package draplugin

import (
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/durability"
)

// What each write of the plugin must survive, and so what it pays for. The reasoning is in
// docs/reliability.md ("Durability"); in short, a power loss is a reboot, which undoes what
// prepare did on the node (dynamic MIG instances, host settings, MPS daemons, specs on the
// tmpfs CDI directory), and after which kubelet prepares again the claim of every pod it
// restarts and unprepares those of pods that are gone. Reconcile forgets every claim of an
// earlier boot, so no version of the checkpoint a power loss may leave revives anything, and
// neither prepare nor unprepare pays for an fsync.
const (
	// stepDurability is for every record prepare and unprepare make on their way (intent,
	// completion, UnprepareStarted, the deletion) and for the CDI spec: they must survive a
	// crash of the process, which the rename gives for free.
	stepDurability = durability.StepDurability
	// reconcileDurability is for what reconciliation changes: after a power loss it draws the
	// same conclusions from the same evidence again.
	reconcileDurability = durability.ReconcileDurability
	// baselineDurability is for the MIG baseline, which belongs to one boot: a power loss starts
	// another.
	baselineDurability = atomicfile.ProcessCrash
)

// syncer is the plugin's: the operating system's, reported to TestHooks.Synced when it is set.
func syncer(h testhooks.Hooks) atomicfile.Syncer { return durability.Syncer(h.Synced) }
