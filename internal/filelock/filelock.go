// Package filelock provides advisory file locks (flock(2)) that exclude other processes and
// other open file descriptions in this process. A lock is released when its Unlock is called or
// when the process dies, so a killed holder never leaves a node locked.
package filelock

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FileMode is the mode of lock files.
const FileMode os.FileMode = 0o600

// File is an open lock file. One goroutine at a time may hold it; callers serialize their own
// use of one File (the lock is per open file description, not per goroutine).
type File struct {
	f *os.File
}

// Open opens (creating it when missing) the lock file at path. Its directory must exist.
func Open(path string) (*File, error) {
	f, err := os.OpenFile(filepath.Clean(path), os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	return &File{f: f}, nil
}

// Lock takes the lock exclusively (or shared), waiting for other holders.
func (l *File) Lock(exclusive bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err := unix.Flock(int(l.f.Fd()), how)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("lock %s: %w", l.f.Name(), err)
		}
		return nil
	}
}

// Unlock releases the lock.
func (l *File) Unlock() error {
	if err := unix.Flock(int(l.f.Fd()), unix.LOCK_UN); err != nil {
		return fmt.Errorf("unlock %s: %w", l.f.Name(), err)
	}
	return nil
}

// Close closes the file, releasing any lock it holds.
func (l *File) Close() error { return l.f.Close() }

// Name is the lock file's path.
func (l *File) Name() string { return l.f.Name() }
