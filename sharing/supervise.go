package sharing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"k8s.io/klog/v2"
)

// SuperviseMPSDaemons checks that the MPS control daemon of every prepared claim runs, and
// restarts (Start, then Ready) each one that does not: daemons die with the plugin's container
// and can crash. It returns the IDs of the daemons it restarted, sorted. Call it at start-up,
// after Restore, and then periodically; it is safe while claims are prepared and undone.
//
// Daemons that only partial records hold (see Prepare) are not restarted: they are to be
// undone. A daemon whose state cannot be read is not restarted either; the error names it.
func (m *Manager) SuperviseMPSDaemons(ctx context.Context) ([]string, error) {
	if m.daemons == nil {
		return nil, nil
	}
	var restarted []string
	var errs []error
	for _, id := range m.registry.usedDaemons() {
		ok, err := m.superviseDaemon(ctx, id)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			restarted = append(restarted, id)
		}
	}
	return restarted, errors.Join(errs...)
}

// superviseDaemon restarts one registered daemon if it does not run, under its GPUs' locks.
func (m *Manager) superviseDaemon(ctx context.Context, id string) (bool, error) {
	_, gpus, ok := m.registry.daemon(id)
	if !ok {
		return false, nil
	}
	unlock := m.locks.lock(gpus)
	defer unlock()
	spec, _, ok := m.registry.daemon(id) // it may have been undone while we waited
	if !ok {
		return false, nil
	}
	logger := klog.FromContext(ctx).WithValues("daemon", id, "devices", spec.DeviceUUIDs)
	running, err := m.daemons.Running(ctx, spec)
	if err != nil {
		return false, fmt.Errorf("MPS control daemon %s for %v: cannot tell whether it runs, leaving it: %w", id, spec.DeviceUUIDs, err)
	}
	if running {
		return false, nil
	}
	logger.Info("MPS control daemon of prepared claims does not run, restarting it")
	if err := m.daemons.Start(ctx, spec); err != nil {
		return false, fmt.Errorf("restarting MPS control daemon %s for %v: %w", id, spec.DeviceUUIDs, err)
	}
	if err := m.daemons.Ready(ctx, spec); err != nil {
		return false, fmt.Errorf("restarted MPS control daemon %s for %v not ready: %w", id, spec.DeviceUUIDs, err)
	}
	return true, nil
}

// MPSCleanup is what Manager.CleanMPSDirs did, by daemon directory name (the daemon ID).
type MPSCleanup struct {
	// Removed are the directories that belonged to no registered claim and were removed,
	// their daemon stopped and their shm tmpfs unmounted.
	Removed []string
	// Running are directories that belong to no registered claim but whose daemon runs:
	// they are left alone, since a claim that kubelet still considers prepared may use it.
	Running []string
}

// CleanMPSDirs removes the daemon directories under the MPS root that belong to no registered
// record (prepared or partial) and to no Prepare in progress: those of claims forgotten at a
// reboot or with a lost checkpoint. Each goes through MPSDaemons.Stop (which unmounts its shm
// tmpfs and removes its directories), then whatever else is left in it is removed. It never
// touches the directory of a registered daemon, nor one whose daemon runs or whose state
// cannot be read. Call it after Restore (at start-up, and periodically if wanted).
func (m *Manager) CleanMPSDirs(ctx context.Context) (MPSCleanup, error) {
	var out MPSCleanup
	entries, err := os.ReadDir(m.mpsRoot)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("listing MPS daemon directories: %w", err)
	}
	if m.daemons == nil {
		return out, errors.New("cleaning MPS daemon directories needs MPSDaemons (WithMPSDaemons)")
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		removed, running, err := m.cleanDir(ctx, e.Name())
		if err != nil {
			errs = append(errs, err)
		}
		if removed {
			out.Removed = append(out.Removed, e.Name())
		}
		if running {
			out.Running = append(out.Running, e.Name())
		}
	}
	return out, errors.Join(errs...)
}

// cleanDir removes one daemon directory unless a registered claim or a Prepare in progress
// uses it or its daemon runs. dirsMu is held throughout, so no Prepare starts using it meanwhile.
func (m *Manager) cleanDir(ctx context.Context, id string) (removed, running bool, err error) {
	m.dirsMu.Lock()
	defer m.dirsMu.Unlock()
	if m.inflight[id] > 0 || slices.Contains(m.registry.usedDaemons(), id) {
		return false, false, nil
	}
	spec := m.daemonSpec(id, nil)
	running, err = m.daemons.Running(ctx, spec)
	if err != nil {
		return false, false, fmt.Errorf("MPS daemon directory %s: cannot tell whether its daemon runs, leaving it: %w", spec.Dir, err)
	}
	if running {
		klog.FromContext(ctx).Info("MPS daemon directory belongs to no prepared claim, but its daemon runs: leaving it", "dir", spec.Dir)
		return false, true, nil
	}
	if err := m.daemons.Stop(ctx, spec); err != nil {
		return false, false, fmt.Errorf("MPS daemon directory %s of no prepared claim: %w", spec.Dir, err)
	}
	if err := os.RemoveAll(spec.Dir); err != nil {
		return false, false, fmt.Errorf("MPS daemon directory %s of no prepared claim: %w", spec.Dir, err)
	}
	klog.FromContext(ctx).V(2).Info("Removed MPS daemon directory of no prepared claim", "dir", spec.Dir)
	return true, false, nil
}

// claimDirs marks the daemons' directories as in use by a Prepare in progress until the
// returned function is called, so that CleanMPSDirs leaves them alone before the claim is
// registered.
func (m *Manager) claimDirs(daemons []MPSDaemonSpec) (release func()) {
	m.dirsMu.Lock()
	defer m.dirsMu.Unlock()
	for _, d := range daemons {
		m.inflight[d.ID]++
	}
	return func() {
		m.dirsMu.Lock()
		defer m.dirsMu.Unlock()
		for _, d := range daemons {
			if m.inflight[d.ID]--; m.inflight[d.ID] <= 0 {
				delete(m.inflight, d.ID)
			}
		}
	}
}
