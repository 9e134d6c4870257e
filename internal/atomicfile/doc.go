// Package atomicfile writes and removes files so that a reader sees either the old content or
// the new one, never a partial write, and makes each change exactly as durable as its caller
// says.
//
// # Atomic replacement
//
// Files.Write writes the data to a temporary file in the target's directory (its name starts
// with TempPrefix, so listings skip it) and renames it over the target. A process killed at any
// point leaves the old content or the new one, plus at worst a temporary file that Clean removes.
//
// # Durability
//
// Surviving a crash of the process costs nothing: the rename is enough, since the kernel keeps
// the page cache. Surviving a power loss costs an fsync, so every call names what it needs
// (Durability): ProcessCrash (no fsync), PowerLossChecked (the directory is fsynced, so the
// rename or removal survives; the content may come back torn, which the reader must detect) or
// PowerLoss (the file and the directory are fsynced). A Syncer does the fsyncs; tests pass one
// that counts them or records what would survive.
//
//	files := atomicfile.New()
//	err := files.Write("/var/lib/plugin/checkpoint.json", data, 0o600, atomicfile.PowerLossChecked)
package atomicfile
