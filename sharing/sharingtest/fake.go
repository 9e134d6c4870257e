package sharingtest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/gpudra/gpudra/sharing"
)

// HostState is the state of a FakeHost, comparable with go-cmp.
type HostState struct {
	// ComputeModes by device UUID.
	ComputeModes map[string]sharing.ComputeMode `json:"computeModes"`
	// TimeSlices by GPU UUID.
	TimeSlices map[string]int `json:"timeSlices"`
	// Daemons that run, by ID.
	Daemons map[string]sharing.MPSDaemonSpec `json:"daemons"`
	// Mounts are the tmpfs mounts, by target directory, with their size in bytes.
	Mounts map[string]int64 `json:"mounts"`
}

func (s HostState) clone() HostState {
	return HostState{ComputeModes: maps.Clone(s.ComputeModes), TimeSlices: maps.Clone(s.TimeSlices),
		Daemons: maps.Clone(s.Daemons), Mounts: maps.Clone(s.Mounts)}
}

// host is everything a FakeHost knows about the machine; a persisted FakeHost keeps it in its
// file.
type host struct {
	// Devices are the GPU and MIG UUIDs, sorted.
	Devices []string `json:"devices"`
	// TimeSliceKnown is false when TimeSlice cannot read the value (HideTimeSlice).
	TimeSliceKnown bool      `json:"timeSliceKnown"`
	State          HostState `json:"state"`
}

func newHost(uuids []string) host {
	h := host{Devices: slices.Sorted(slices.Values(uuids)), TimeSliceKnown: true,
		State: HostState{ComputeModes: map[string]sharing.ComputeMode{}, TimeSlices: map[string]int{},
			Daemons: map[string]sharing.MPSDaemonSpec{}, Mounts: map[string]int64{}}}
	h.Devices = slices.Compact(h.Devices)
	for _, u := range h.Devices {
		h.State.ComputeModes[u] = sharing.ComputeModeDefault
		if strings.HasPrefix(u, "GPU-") {
			h.State.TimeSlices[u] = 0
		}
	}
	return h
}

// device checks that the host has the device. MIG devices ("MIG-...") come and go with their
// instances (dynamic MIG creates them after the host was built), so any MIG UUID is accepted,
// in compute mode DEFAULT until set.
func (h *host) device(uuid string) error {
	if strings.HasPrefix(uuid, "MIG-") {
		return nil
	}
	if _, ok := slices.BinarySearch(h.Devices, uuid); !ok {
		return fmt.Errorf("no device %s: the host has %v", uuid, h.Devices)
	}
	return nil
}

// FakeHost is a host for package sharing: it implements TimeSlicer, ComputeModeSetter,
// MPSDaemons and Mounter, keeps the resulting host state, records every call, and can be told
// to fail a call (FailOn, or FailAfter its change), to run a hook before every change
// (SetHook), and to let a daemon die (KillDaemon). NewFakeHost keeps the state in memory;
// OpenFakeHost keeps it in a file, so that it survives the test's process being killed. It is
// safe for concurrent use.
type FakeHost struct {
	mu     sync.Mutex
	host   host
	calls  []string
	failOn map[string]error
	// failAfter are the calls that fail after their change (FailAfter).
	failAfter map[string]error
	hook      func(call string) error
	// file is where a persisted host keeps its state; nil in memory.
	file *stateFile
	// broken is the error of a state setter that could not save its change; the next call
	// returns it.
	broken error
}

var (
	_ sharing.TimeSlicer        = (*FakeHost)(nil)
	_ sharing.ComputeModeSetter = (*FakeHost)(nil)
	_ sharing.MPSDaemons        = (*FakeHost)(nil)
	_ sharing.Mounter           = (*FakeHost)(nil)
)

// NewFakeHost returns an in-memory host with the given devices (GPU and MIG UUIDs), each in
// compute mode DEFAULT with time slice 0, and no daemon or mount.
func NewFakeHost(uuids ...string) *FakeHost {
	return &FakeHost{host: newHost(uuids), failOn: map[string]error{}}
}

// do runs op on the host under the host's lock. A persisted host reads its file first, under
// an exclusive file lock (so that several processes can share one host, as two plugin pods do
// during a rolling update), and writes it back when op reports a change. op must not change
// anything when it returns an error.
func (f *FakeHost) do(op func(h *host) (changed bool, err error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.broken; err != nil {
		f.broken = nil
		return err
	}
	if f.file == nil {
		_, err := op(&f.host)
		return err
	}
	return f.file.update(&f.host, op)
}

// set is do for the state setters, which return no error: one that fails the next call.
func (f *FakeHost) set(op func(h *host)) {
	err := f.do(func(h *host) (bool, error) { op(h); return true, nil })
	if err != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.broken = err
	}
}

// SetComputeModeState sets a device's compute mode without recording a call.
func (f *FakeHost) SetComputeModeState(uuid string, m sharing.ComputeMode) {
	f.set(func(h *host) { h.setComputeMode(uuid, m) })
}

// SetTimeSliceState sets a GPU's time slice without recording a call.
func (f *FakeHost) SetTimeSliceState(uuid string, v int) {
	f.set(func(h *host) { h.State.TimeSlices[uuid] = v })
}

// KillDaemon makes a running MPS daemon die, as it does with the plugin's container, without
// recording a call. Its shm tmpfs stays mounted, as a real one does.
func (f *FakeHost) KillDaemon(id string) {
	f.set(func(h *host) { delete(h.State.Daemons, id) })
}

// HideTimeSlice makes TimeSlice report that the value cannot be read, as nvidia-smi does.
func (f *FakeHost) HideTimeSlice() {
	f.set(func(h *host) { h.TimeSliceKnown = false })
}

// FailOn makes the call with this exact description (as Calls lists it, e.g.
// "SetComputeMode GPU-1 EXCLUSIVE_PROCESS" or "Start mps-id") return err; a nil err removes
// the failure.
func (f *FakeHost) FailOn(call string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.failOn, call)
		return
	}
	f.failOn[call] = err
}

// SetHook installs a function that every call that changes the host (SetTimeSlice,
// SetComputeMode, Start, Stop, Mount, Unmount) runs first, with the call's description as
// Calls lists it, and without the host's lock held, so it may block, or kill the process (a
// crash test's injection point). An error it returns fails the call before the host changes.
// nil removes the hook.
func (f *FakeHost) SetHook(hook func(call string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = hook
}

// State returns a copy of the host state (read from the file for a persisted host). It is
// the zero HostState when the file cannot be read.
func (f *FakeHost) State() HostState {
	var s HostState
	_ = f.do(func(h *host) (bool, error) { s = h.State.clone(); return false, nil })
	return s
}

// Calls returns the calls made so far through this FakeHost, in order.
func (f *FakeHost) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// ResetCalls forgets the recorded calls.
func (f *FakeHost) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

// begin records a call and decides whether it fails: a done ctx fails it as exec.CommandContext
// refuses to start a command, then the hook (for a change), then an error set with FailOn.
func (f *FakeHost) begin(ctx context.Context, change bool, format string, args ...any) error {
	c := fmt.Sprintf(format, args...)
	f.mu.Lock()
	f.calls = append(f.calls, c)
	hook := f.hook
	f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", c, err)
	}
	if change && hook != nil {
		if err := hook(c); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failOn[c]
}

// TimeSlice implements sharing.TimeSlicer.
func (f *FakeHost) TimeSlice(ctx context.Context, uuid string) (int, bool, error) {
	if err := f.begin(ctx, false, "TimeSlice %s", uuid); err != nil {
		return 0, false, err
	}
	var v int
	var known bool
	err := f.do(func(h *host) (bool, error) {
		v, known = h.State.TimeSlices[uuid], h.TimeSliceKnown
		return false, h.device(uuid)
	})
	if err != nil {
		return 0, false, err
	}
	return v, known, nil
}

// SetTimeSlice implements sharing.TimeSlicer.
func (f *FakeHost) SetTimeSlice(ctx context.Context, uuid string, v int) error {
	if err := f.begin(ctx, true, "SetTimeSlice %s %d", uuid, v); err != nil {
		return err
	}
	return f.after(f.do(func(h *host) (bool, error) {
		if err := h.device(uuid); err != nil {
			return false, err
		}
		if !strings.HasPrefix(uuid, "GPU-") {
			return false, fmt.Errorf("time slices are set on full GPUs, not on %s", uuid)
		}
		h.State.TimeSlices[uuid] = v
		return true, nil
	}), "SetTimeSlice %s %d", uuid, v)
}

// ComputeMode implements sharing.ComputeModeSetter.
func (f *FakeHost) ComputeMode(ctx context.Context, uuid string) (sharing.ComputeMode, error) {
	if err := f.begin(ctx, false, "ComputeMode %s", uuid); err != nil {
		return 0, err
	}
	var m sharing.ComputeMode
	err := f.do(func(h *host) (bool, error) {
		m = h.State.ComputeModes[uuid]
		return false, h.device(uuid)
	})
	if err != nil {
		return 0, err
	}
	return m, nil
}

// SetComputeMode implements sharing.ComputeModeSetter.
func (f *FakeHost) SetComputeMode(ctx context.Context, uuid string, m sharing.ComputeMode) error {
	if err := f.begin(ctx, true, "SetComputeMode %s %s", uuid, m); err != nil {
		return err
	}
	return f.after(f.do(func(h *host) (bool, error) {
		if err := h.device(uuid); err != nil {
			return false, err
		}
		h.setComputeMode(uuid, m)
		return true, nil
	}), "SetComputeMode %s %s", uuid, m)
}

// setComputeMode records a device's compute mode. A MIG device the host was not built with is in
// DEFAULT until set, so setting it back to DEFAULT removes its entry: the state is then what it
// was before, whichever MIG devices came and went.
func (h *host) setComputeMode(uuid string, m sharing.ComputeMode) {
	if _, known := slices.BinarySearch(h.Devices, uuid); !known && m == sharing.ComputeModeDefault && strings.HasPrefix(uuid, "MIG-") {
		delete(h.State.ComputeModes, uuid)
		return
	}
	h.State.ComputeModes[uuid] = m
}

// Start implements sharing.MPSDaemons. Like the real daemon setup, it needs every device in
// compute mode EXCLUSIVE_PROCESS, where the daemon's server is the device's only context and no
// other daemon may serve it, or DEFAULT, where the servers of several daemons each hold a
// context; it mounts the shm tmpfs (spec.ShmSizeBytes, or sharing.DefaultMPSShmSize when 0)
// unless something is mounted there already.
func (f *FakeHost) Start(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	if err := f.begin(ctx, true, "Start %s", spec.ID); err != nil {
		return err
	}
	return f.after(f.do(func(h *host) (bool, error) {
		for _, u := range spec.DeviceUUIDs {
			if err := h.device(u); err != nil {
				return false, err
			}
			if err := h.serverFits(spec.ID, u); err != nil {
				return false, err
			}
		}
		h.State.Daemons[spec.ID] = spec
		if _, ok := h.State.Mounts[spec.ShmDir]; spec.ShmDir != "" && !ok {
			h.State.Mounts[spec.ShmDir] = cmp.Or(spec.ShmSizeBytes, sharing.DefaultMPSShmSize)
		}
		return true, nil
	}), "Start %s", spec.ID)
}

// serverFits fails when device u cannot take one more MPS server, that of daemon id.
func (h *host) serverFits(id, u string) error {
	switch mode := h.State.ComputeModes[u]; mode {
	case sharing.ComputeModeDefault:
		return nil
	case sharing.ComputeModeExclusiveProcess:
		for other, d := range h.State.Daemons {
			if other != id && slices.Contains(d.DeviceUUIDs, u) {
				return fmt.Errorf("device %s is in compute mode EXCLUSIVE_PROCESS and MPS control daemon %s's server holds it", u, other)
			}
		}
		return nil
	default:
		return fmt.Errorf("device %s is in compute mode %s, want EXCLUSIVE_PROCESS or DEFAULT", u, mode)
	}
}

// Ready implements sharing.MPSDaemons.
func (f *FakeHost) Ready(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	if err := f.begin(ctx, false, "Ready %s", spec.ID); err != nil {
		return err
	}
	return f.do(func(h *host) (bool, error) {
		if _, ok := h.State.Daemons[spec.ID]; !ok {
			return false, fmt.Errorf("MPS control daemon %s does not run", spec.ID)
		}
		return false, nil
	})
}

// Running implements sharing.MPSDaemons.
func (f *FakeHost) Running(ctx context.Context, spec sharing.MPSDaemonSpec) (bool, error) {
	if err := f.begin(ctx, false, "Running %s", spec.ID); err != nil {
		return false, err
	}
	var ok bool
	err := f.do(func(h *host) (bool, error) {
		_, ok = h.State.Daemons[spec.ID]
		return false, nil
	})
	return ok, err
}

// Stop implements sharing.MPSDaemons: the daemon stops and its shm tmpfs is unmounted.
func (f *FakeHost) Stop(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	if err := f.begin(ctx, true, "Stop %s", spec.ID); err != nil {
		return err
	}
	return f.after(f.do(func(h *host) (bool, error) {
		delete(h.State.Daemons, spec.ID)
		delete(h.State.Mounts, spec.ShmDir)
		return true, nil
	}), "Stop %s", spec.ID)
}

// Mount implements sharing.Mounter: it records a tmpfs of sizeBytes on target (the directory
// need not exist), so that MPSControl can be tested without privileges.
func (f *FakeHost) Mount(ctx context.Context, target string, sizeBytes int64) error {
	if err := f.begin(ctx, true, "Mount %s %d", target, sizeBytes); err != nil {
		return err
	}
	return f.after(f.do(func(h *host) (bool, error) {
		if sizeBytes <= 0 {
			return false, fmt.Errorf("tmpfs on %s: size %d bytes: the size must be positive", target, sizeBytes)
		}
		if _, ok := h.State.Mounts[target]; ok {
			return false, nil
		}
		h.State.Mounts[target] = sizeBytes
		return true, nil
	}), "Mount %s %d", target, sizeBytes)
}

// Unmount implements sharing.Mounter.
func (f *FakeHost) Unmount(ctx context.Context, target string) error {
	if err := f.begin(ctx, true, "Unmount %s", target); err != nil {
		return err
	}
	return f.after(f.do(func(h *host) (bool, error) {
		_, ok := h.State.Mounts[target]
		delete(h.State.Mounts, target)
		return ok, nil
	}), "Unmount %s", target)
}
