// Package checkpoint is the crash-safe record of what a DRA kubelet plugin has prepared on its
// node: per ResourceClaim, its phase (prepare started, prepare completed, unprepare started) and,
// per device, what is needed to undo or redo the preparation without the API server (physical
// GPU UUID, MIG instance identity and whether the driver created it, CDI device IDs, the sharing
// package's undo record).
//
// # File
//
// The state lives in one file, checkpoint.json (mode 0600, in a directory of mode 0700), as an
// envelope
//
//	{"version": 2, "bootID": "...", "checksum": "sha256:<hex>", "data": {...}}
//
// where the checksum is the SHA-256 of the compact JSON of data as stored. Every change is written
// to a temporary file renamed over the checkpoint (internal/atomicfile), so a crash of the
// process leaves either the old or the new state; Open removes the temporary file such a crash
// leaves behind.
//
// # Durability
//
// Each update says what it must survive (atomicfile.Durability). Surviving a crash of the
// process costs nothing. Surviving a power loss costs an fsync: PowerLossChecked fsyncs the
// directory, so the new file's name survives but a power loss may tear its content, which the
// checksum detects (Open then treats the file as corrupt); PowerLoss fsyncs the file too. An
// update that changes nothing but asks for more durability than the file has syncs it. After a
// power loss the checkpoint may therefore be any version from the last synced one on, or torn:
// the caller's reconciliation must be safe with each (docs/reliability.md, "Durability").
//
// # Failure handling
//
// An unusable checkpoint (unreadable, not JSON, truncated, checksum mismatch, content violating
// the schema) never stops the driver: Open renames it to checkpoint.json.corrupt-<UTC time>
// (keeping the newest few), logs why, starts with an empty state and says so in LoadReport, and
// the caller rebuilds its state from hardware and CDI files. A checkpoint from a newer schema is
// the exception: Open refuses it with *UnsupportedVersionError rather than forget claims it cannot
// read. An older schema is migrated on Open; the original file is kept beside it.
//
// # Reboots
//
// The kernel boot ID is stored in the envelope and stamped on each claim when it changes.
// LoadReport.Rebooted tells the caller the node rebooted since the last write; a claim whose
// BootID differs from Store.BootID was prepared in an earlier boot, so its dynamic MIG instances,
// host settings and tmpfs CDI specs no longer exist. The store keeps such claims: deciding to
// re-prepare or drop them is reconciliation's job, not the store's.
//
// # Concurrency
//
// A Store is safe for concurrent use within one process. Updates are linearizable and
// group-committed: updates arriving while a write is in flight are applied in order and written
// together, with one fsync when any of them asks for one, so concurrent operations on different
// GPUs do not queue one write and one fsync each behind a node-wide lock.
//
// Two processes may use one directory (two plugin pods during a rolling update): every write
// holds the lock file checkpoint.lock (flock, released when a process dies) and first re-reads
// the checkpoint if the other process changed it, so no update is lost; Refresh re-reads it for
// a caller about to act on the state. Open cleans temporaries and moves unusable files aside
// under the same lock.
package checkpoint
