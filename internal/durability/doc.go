// Package durability says what each write of a kubelet plugin must survive (StepDurability,
// ReconcileDurability; docs/reliability.md, "Durability") and opens a plugin's checkpoint with
// its logger, clock, fsync hook and checkpoint-write hook (OpenStore, Syncer).
package durability
