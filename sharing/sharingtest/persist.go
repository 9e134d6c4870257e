package sharingtest

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// OpenFakeHost returns a FakeHost whose whole state (devices, compute modes, time slices,
// running daemons, mounts, HideTimeSlice) lives in the file at path, so that it survives the
// test process being killed (SIGKILL at a hook, see SetHook) and can be shared by several
// processes. The file is created from uuids as NewFakeHost would when it does not exist;
// when it does, its state is loaded and uuids, if given, must be its devices.
//
// Every call reads the file under an exclusive lock on path+".lock" and every change
// rewrites it atomically (a temporary file renamed over it; not fsynced: it survives a killed
// process, not a power loss). Recorded calls, FailOn errors and the hook belong to the
// FakeHost value and are not kept in the file.
func OpenFakeHost(path string, uuids ...string) (*FakeHost, error) {
	if path == "" {
		return nil, errors.New("sharingtest: OpenFakeHost needs a state file path")
	}
	f := &FakeHost{failOn: map[string]error{}, file: &stateFile{path: path}}
	err := f.file.locked(func() error {
		// Temporary files are only written under the lock: any found now are a killed
		// writer's leftovers.
		if err := f.file.removeTemps(); err != nil {
			return err
		}
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			f.host = newHost(uuids)
			return f.file.save(&f.host)
		}
		if err := f.file.load(&f.host); err != nil {
			return err
		}
		if want := newHost(uuids).Devices; len(uuids) > 0 && !slices.Equal(want, f.host.Devices) {
			return fmt.Errorf("fake host state file %s has devices %v, not the %v asked for", path, f.host.Devices, want)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// stateFile is the file of a persisted FakeHost.
type stateFile struct {
	path string
}

// update loads h from the file, runs op on it and saves it when op changed it, all under the
// file lock.
func (s *stateFile) update(h *host, op func(h *host) (bool, error)) error {
	return s.locked(func() error {
		if err := s.load(h); err != nil {
			return err
		}
		changed, err := op(h)
		if err != nil || !changed {
			return err
		}
		return s.save(h)
	})
}

// locked runs fn holding an exclusive flock on the lock file next to the state file (not on
// the state file itself, which each save replaces).
func (s *stateFile) locked(fn func() error) error {
	lf, err := os.OpenFile(s.path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("fake host lock: %w", err)
	}
	defer func() { _ = lf.Close() }() // closing releases the lock
	for {
		err = unix.Flock(int(lf.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("fake host lock %s: %w", lf.Name(), err)
	}
	return fn()
}

func (s *stateFile) load(h *host) error {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return fmt.Errorf("fake host state: %w", err)
	}
	var loaded host
	if err := json.Unmarshal(data, &loaded); err != nil {
		return fmt.Errorf("fake host state file %s: %w", s.path, err)
	}
	st := &loaded.State
	st.ComputeModes, st.TimeSlices = orEmpty(st.ComputeModes), orEmpty(st.TimeSlices)
	st.Daemons, st.Mounts = orEmpty(st.Daemons), orEmpty(st.Mounts)
	*h = loaded
	return nil
}

// orEmpty returns m, or an empty map for nil (a file with "null").
func orEmpty[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	return m
}

func (s *stateFile) save(h *host) error {
	data, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return fmt.Errorf("fake host state: %w", err)
	}
	dir, base := filepath.Split(s.path)
	tmp, err := os.CreateTemp(cmp.Or(dir, "."), base+tempInfix+"*")
	if err != nil {
		return fmt.Errorf("fake host state: %w", err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("fake host state %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("fake host state: %w", err)
	}
	return nil
}

// tempInfix marks the temporary files of a state file: <base>.tmp-<random>.
const tempInfix = ".tmp-"

func (s *stateFile) removeTemps() error {
	matches, err := filepath.Glob(s.path + tempInfix + "*")
	if err != nil {
		return fmt.Errorf("fake host state: %w", err)
	}
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("fake host state: %w", err)
		}
	}
	return nil
}
