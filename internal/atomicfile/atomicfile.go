package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TempPrefix starts the name of every temporary file this package creates. Readers that list a
// directory skip names with this prefix; Clean removes leftovers of a crash.
const TempPrefix = ".tmp-"

// Durability is what a write or a removal must survive. Every call says which it needs, and
// pays for that and no more: a power loss costs an fsync, a process crash costs nothing.
type Durability int

const (
	// ProcessCrash: a reader sees the old content or the new one, never a partial write, even
	// when the writing process is killed at any point (the data goes to a temporary file that is
	// renamed over the target). Nothing is fsynced: after a power loss or a kernel crash the
	// file may hold any earlier version, or be torn. For files that a reboot makes worthless
	// (a tmpfs, state that belongs to one boot) or that reconciliation rebuilds.
	ProcessCrash Durability = iota + 1
	// PowerLossChecked: in addition, once the call returns, the change of the directory (the
	// rename, the removal) survives a power loss: the directory is fsynced, the file is not.
	// After a power loss the name holds the new version, or, when the file system had not
	// written its data yet, torn content: only for files whose reader detects that (a checksum)
	// and has a safe way to go on without them. One fsync.
	PowerLossChecked
	// PowerLoss: the new content survives a power loss intact: the file is fsynced before the
	// rename and the directory after it. Two fsyncs.
	PowerLoss
)

// String returns the constant's name.
func (d Durability) String() string {
	switch d {
	case ProcessCrash:
		return "ProcessCrash"
	case PowerLossChecked:
		return "PowerLossChecked"
	case PowerLoss:
		return "PowerLoss"
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

// Check returns an error unless d is one of the constants above.
func (d Durability) Check() error {
	if d < ProcessCrash || d > PowerLoss {
		return fmt.Errorf("durability %v: must be ProcessCrash, PowerLossChecked or PowerLoss", d)
	}
	return nil
}

// Syncer makes what was written to a file, or the entries of a directory, survive a power loss.
// OSSyncer calls fsync; tests count the calls or record what would survive.
type Syncer interface {
	// SyncFile flushes the data and metadata of an open file.
	SyncFile(f *os.File) error
	// SyncDir flushes a directory's entries: the renames and removals made in it.
	SyncDir(dir string) error
}

// OSSyncer is the operating system's fsync(2).
type OSSyncer struct{}

var _ Syncer = OSSyncer{}

// SyncFile implements Syncer.
func (OSSyncer) SyncFile(f *os.File) error { return f.Sync() }

// SyncDir implements Syncer.
func (OSSyncer) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Files writes and removes files atomically, with the durability each call asks for. The zero
// value is not usable; build one with New. A Files has no mutable state and is safe for
// concurrent use.
type Files struct {
	syncer Syncer
}

// Option configures New.
type Option func(*Files)

// WithSyncer makes the Files sync through s instead of OSSyncer.
func WithSyncer(s Syncer) Option { return func(f *Files) { f.syncer = s } }

// New returns a Files that syncs through OSSyncer unless WithSyncer says otherwise.
func New(opts ...Option) *Files {
	f := &Files{syncer: OSSyncer{}}
	for _, o := range opts {
		o(f)
	}
	if f.syncer == nil {
		f.syncer = OSSyncer{}
	}
	return f
}

// NotDurableError is returned by Write when the new content is in place (the rename happened)
// but the directory could not be fsynced, so the rename may not survive a power loss. Callers
// must treat the file as written.
type NotDurableError struct {
	// Path is the file that was replaced.
	Path string
	// Err is the fsync error.
	Err error
}

// Error implements error.
func (e *NotDurableError) Error() string {
	return fmt.Sprintf("%s was replaced but may not survive a power loss: %v", e.Path, e.Err)
}

// Unwrap returns the fsync error.
func (e *NotDurableError) Unwrap() error { return e.Err }

// Write atomically replaces path with data, created with mode perm, as durable as d says. The
// parent directory must exist. On error the target is unchanged and no temporary file is left
// behind, except for a *NotDurableError, which says the target was replaced but its directory
// could not be synced.
func (fs *Files) Write(path string, data []byte, perm os.FileMode, d Durability) (err error) {
	if err := d.Check(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, TempPrefix+base+"-")
	if err != nil {
		return fmt.Errorf("create temporary file for %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if d == PowerLoss {
		if err = fs.syncer.SyncFile(f); err != nil {
			return fmt.Errorf("fsync %s: %w", tmp, err)
		}
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	if d == ProcessCrash {
		return nil
	}
	if serr := fs.SyncDir(dir); serr != nil {
		return &NotDurableError{Path: path, Err: serr}
	}
	return nil
}

// Remove deletes path, as durable as d says: ProcessCrash only unlinks, PowerLossChecked and
// PowerLoss also fsync the directory. A missing file is not an error (and is not synced).
func (fs *Files) Remove(path string, d Durability) error {
	if err := d.Check(); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if d == ProcessCrash {
		return nil
	}
	return fs.SyncDir(filepath.Dir(path))
}

// Sync makes the file at path, as it is now, as durable as d says: for PowerLoss its content
// is fsynced, and for PowerLoss and PowerLossChecked its directory. ProcessCrash does nothing.
func (fs *Files) Sync(path string, d Durability) error {
	if err := d.Check(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if d == PowerLoss {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("open %s to fsync it: %w", path, err)
		}
		err = fs.syncer.SyncFile(f)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("fsync %s: %w", path, err)
		}
	}
	if d == ProcessCrash {
		return nil
	}
	return fs.SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs a directory so that renames and removals in it survive a power loss.
func (fs *Files) SyncDir(dir string) error {
	if err := fs.syncer.SyncDir(dir); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// IsTemp reports whether a file name is one of this package's temporary files.
func IsTemp(name string) bool { return strings.HasPrefix(filepath.Base(name), TempPrefix) }

// Clean removes the temporary files of the file named base that a writer left in dir when it
// crashed before its rename, and returns their names. Call it when no write of that file can be
// under way (under the lock its writers hold); temporaries of other files are left alone, as
// their writers may hold other locks. The removals are not synced: a temporary file that comes
// back after a power loss is removed by the next Clean.
func Clean(dir, base string) ([]string, error) {
	prefix := TempPrefix + base + "-"
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read directory %s: %w", dir, err)
	}
	var removed []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("remove leftover %s: %w", p, err)
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}
