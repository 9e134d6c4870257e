package cdi

import "os"

// SetWriteFunc replaces the function a Writer writes files with, so tests can simulate a crash
// in the middle of a write.
func SetWriteFunc(w *Writer, f func(path string, data []byte, perm os.FileMode) error) { w.write = f }
