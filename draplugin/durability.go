package draplugin

import (
	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/pluginkit"
)

// What each write of the plugin must survive, and so what it pays for. The reasoning is in
// docs/reliability.md ("Durability"); in short, a power loss is a reboot, which undoes what
// prepare did on the node (dynamic MIG instances, host settings, MPS daemons, specs on the
// tmpfs CDI directory), and after which kubelet prepares again the claim of every pod it
// restarts and unprepares those of pods that are gone. The checkpoint only has to keep
// reconciliation from reviving what kubelet was told is gone.
const (
	// stepDurability is for every record prepare and unprepare make on their way (intent,
	// completion, UnprepareStarted) and for the CDI spec: they must survive a crash of the
	// process, which the rename gives for free. A power loss may revert them: whatever version
	// of the checkpoint survives, reconciliation forgets the claims whose node state the reboot
	// erased, and kubelet's next prepare of the others is answered the same way with the entry
	// or without it.
	stepDurability = pluginkit.StepDurability
	// The checkpoint once unprepares succeeded, before kubelet is told, is synced with
	// pluginkit.UnprepareDurability (pluginkit.MakeDurable, once per call): kubelet then forgets
	// the claims, so a checkpoint reverted to before the unprepare would keep a plain claim
	// prepared (and its spec rewritten) forever. The directory fsync makes the newer
	// checkpoint's name survive; a power loss may still tear its content, which the checksum
	// detects, and a checkpoint that cannot be trusted is rebuilt from what is on the node,
	// where nothing of the claim is left. The one fsync of the hot path.

	// reconcileDurability is for what reconciliation changes: after a power loss it draws the
	// same conclusions from the same evidence again.
	reconcileDurability = pluginkit.ReconcileDurability
	// baselineDurability is for the MIG baseline, which belongs to one boot: a power loss starts
	// another.
	baselineDurability = atomicfile.ProcessCrash
)

// syncer is the plugin's: the operating system's, reported to TestHooks.Synced when it is set.
func (h TestHooks) syncer() atomicfile.Syncer { return pluginkit.Syncer(h.Synced) }
