package cdi

import (
	"os"

	"github.com/gpudra/gpudra/internal/atomicfile"
)

// SetWriteFunc replaces the function a Writer writes files with, so tests can simulate a crash
// in the middle of a write. nil restores the default.
func SetWriteFunc(w *Writer, f func(path string, data []byte, perm os.FileMode) error) { w.write = f }

// SetSyncer makes the Writer's fsyncs, if it made any, go through s.
func SetSyncer(w *Writer, s atomicfile.Syncer) { w.files = atomicfile.New(atomicfile.WithSyncer(s)) }
