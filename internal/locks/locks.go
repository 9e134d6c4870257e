package locks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/gpudra/gpudra/internal/filelock"
)

// Locks serializes operations per key (a physical GPU's UUID, an accelerator's device name),
// within this process (a mutex per key) and across processes (a lock file per key in the state
// directory), so that two plugin processes serving one node during a rolling update never work
// on the same device at once. Locks are always taken in sorted order, so operations on several
// devices cannot deadlock.
type Locks struct {
	dir string

	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	file *filelock.File // opened on first use; used only while mu is held
}

// LockDirName is the directory of the per-key lock files inside the state directory.
const LockDirName = "locks"

// NewLocks returns the locks whose files are in the state directory's LockDirName, which it
// creates.
func NewLocks(stateDir string) (*Locks, error) {
	dir := filepath.Join(stateDir, LockDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create lock directory: %w", err)
	}
	return &Locks{dir: dir, locks: map[string]*keyLock{}}, nil
}

// Lock takes the locks of the keys and returns the unlock. A key must be usable as a file
// name.
func (g *Locks) Lock(keys []string) (func(), error) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var held []*keyLock
	unlock := func() {
		for _, l := range slices.Backward(held) {
			_ = l.file.Unlock()
			l.mu.Unlock()
		}
	}
	for _, u := range keys {
		l, err := g.get(u)
		if err != nil {
			unlock()
			return nil, err
		}
		l.mu.Lock()
		if err := g.lockFile(l, u); err != nil {
			l.mu.Unlock()
			unlock()
			return nil, err
		}
		held = append(held, l)
	}
	return unlock, nil
}

func (g *Locks) get(key string) (*keyLock, error) {
	if key == "" || strings.ContainsAny(key, `/\`) || key == "." || key == ".." {
		return nil, fmt.Errorf("lock key %q cannot name a lock file", key)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	l, ok := g.locks[key]
	if !ok {
		l = &keyLock{}
		g.locks[key] = l
	}
	return l, nil
}

// lockFile takes the cross-process lock of a key whose mutex is held.
func (g *Locks) lockFile(l *keyLock, key string) error {
	if l.file == nil {
		f, err := filelock.Open(filepath.Join(g.dir, key+".lock"))
		if err != nil {
			return err
		}
		l.file = f
	}
	return l.file.Lock(true)
}

// Close closes the lock files; no lock may be held.
func (g *Locks) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for _, l := range g.locks {
		if l.file != nil {
			errs = append(errs, l.file.Close())
			l.file = nil
		}
	}
	return errors.Join(errs...)
}
