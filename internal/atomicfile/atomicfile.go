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

// Write atomically replaces path with data, created with mode perm. The parent directory must
// exist. On error the target is unchanged and no temporary file is left behind, except for a
// *NotDurableError, which says the target was replaced but its directory could not be synced.
func Write(path string, data []byte, perm os.FileMode) (err error) {
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
	if err = f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	if serr := SyncDir(dir); serr != nil {
		return &NotDurableError{Path: path, Err: serr}
	}
	return nil
}

// Remove deletes path and fsyncs its directory. A missing file is not an error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs a directory so that renames and removals in it are durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// IsTemp reports whether a file name is one of this package's temporary files.
func IsTemp(name string) bool { return strings.HasPrefix(filepath.Base(name), TempPrefix) }

// Clean removes temporary files left in dir by a writer that crashed before its rename, and
// returns their names.
func Clean(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read directory %s: %w", dir, err)
	}
	var removed []string
	for _, e := range entries {
		if e.IsDir() || !IsTemp(e.Name()) {
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
