package vfio

import (
	"io/fs"
	"os"
)

// FS is the file access a SysfsBinder needs. OSFS is the host's; gputest.PCIHost is a fake
// host whose PCI driver bindings react to the writes.
type FS interface {
	// ReadFile returns the contents of a file.
	ReadFile(name string) ([]byte, error)
	// WriteFile writes data to an existing file, as a single write (sysfs attributes take one
	// write each); it never creates the file.
	WriteFile(name string, data []byte) error
	// Readlink returns the target of a symbolic link.
	Readlink(name string) (string, error)
	// ReadDir returns the names of a directory's entries, sorted.
	ReadDir(name string) ([]string, error)
	// Stat reports whether a file exists (fs.ErrNotExist when it does not).
	Stat(name string) (fs.FileInfo, error)
	// CharDevice returns the numbers of a character device node; an error when name is not one.
	CharDevice(name string) (major, minor int64, err error)
}

// OSFS is the host's file system.
type OSFS struct{}

var _ FS = OSFS{}

// ReadFile implements FS with os.ReadFile.
func (OSFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

// WriteFile implements FS: one write to an existing file opened write-only.
func (OSFS) WriteFile(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Readlink implements FS with os.Readlink.
func (OSFS) Readlink(name string) (string, error) { return os.Readlink(name) }

// ReadDir implements FS with os.ReadDir.
func (OSFS) ReadDir(name string) ([]string, error) {
	entries, err := os.ReadDir(name)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// Stat implements FS with os.Stat.
func (OSFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }
