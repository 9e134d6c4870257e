// Package atomicfile writes files so that a reader sees either the old content or the new one,
// never a partial write: the data goes to a temporary file in the same directory, is fsynced,
// renamed over the target, and the directory is fsynced so the rename survives a crash.
package atomicfile
