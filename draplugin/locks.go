package draplugin

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

// gpuLocks serializes operations per physical GPU, within this process (a mutex per GPU) and
// across processes (a lock file per GPU in the state directory), so that two plugin processes
// serving one node during a rolling update never work on the same GPU at once. Locks are
// always taken in sorted order, so operations on several GPUs cannot deadlock.
type gpuLocks struct {
	dir string

	mu    sync.Mutex
	locks map[string]*gpuLock
}

type gpuLock struct {
	mu   sync.Mutex
	file *filelock.File // opened on first use; used only while mu is held
}

// lockDirName is the directory of the per-GPU lock files inside the state directory.
const lockDirName = "locks"

func newGPULocks(stateDir string) (*gpuLocks, error) {
	dir := filepath.Join(stateDir, lockDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create lock directory: %w", err)
	}
	return &gpuLocks{dir: dir, locks: map[string]*gpuLock{}}, nil
}

// lock takes the locks of the GPUs (by UUID) and returns the unlock.
func (g *gpuLocks) lock(uuids []string) (func(), error) {
	uuids = slices.Clone(uuids)
	slices.Sort(uuids)
	uuids = slices.Compact(uuids)
	var held []*gpuLock
	unlock := func() {
		for _, l := range slices.Backward(held) {
			_ = l.file.Unlock()
			l.mu.Unlock()
		}
	}
	for _, u := range uuids {
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

func (g *gpuLocks) get(uuid string) (*gpuLock, error) {
	if uuid == "" || strings.ContainsAny(uuid, `/\`) || uuid == "." || uuid == ".." {
		return nil, fmt.Errorf("GPU UUID %q cannot name a lock file", uuid)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	l, ok := g.locks[uuid]
	if !ok {
		l = &gpuLock{}
		g.locks[uuid] = l
	}
	return l, nil
}

// lockFile takes the cross-process lock of a GPU whose mutex is held.
func (g *gpuLocks) lockFile(l *gpuLock, uuid string) error {
	if l.file == nil {
		f, err := filelock.Open(filepath.Join(g.dir, uuid+".lock"))
		if err != nil {
			return err
		}
		l.file = f
	}
	return l.file.Lock(true)
}

// close closes the lock files; no lock may be held.
func (g *gpuLocks) close() error {
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
