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

// FakeHost is an in-memory host. It is safe for concurrent use.
type FakeHost struct {
	mu      sync.Mutex
	state   HostState
	calls   []string
	failOn  map[string]error
	known   bool
	devices map[string]bool
	hook    func(call string) error
}

var (
	_ sharing.TimeSlicer        = (*FakeHost)(nil)
	_ sharing.ComputeModeSetter = (*FakeHost)(nil)
	_ sharing.MPSDaemons        = (*FakeHost)(nil)
	_ sharing.Mounter           = (*FakeHost)(nil)
)

// NewFakeHost returns a host with the given devices (GPU and MIG UUIDs), each in compute
// mode DEFAULT with time slice 0, and no daemon.
func NewFakeHost(uuids ...string) *FakeHost {
	f := &FakeHost{
		state:   HostState{ComputeModes: map[string]sharing.ComputeMode{}, TimeSlices: map[string]int{}, Daemons: map[string]sharing.MPSDaemonSpec{}, Mounts: map[string]int64{}},
		failOn:  map[string]error{},
		known:   true,
		devices: map[string]bool{},
	}
	for _, u := range uuids {
		f.devices[u] = true
		f.state.ComputeModes[u] = sharing.ComputeModeDefault
		if strings.HasPrefix(u, "GPU-") {
			f.state.TimeSlices[u] = 0
		}
	}
	return f
}

// SetComputeModeState sets a device's compute mode without recording a call.
func (f *FakeHost) SetComputeModeState(uuid string, m sharing.ComputeMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state.ComputeModes[uuid] = m
}

// SetTimeSliceState sets a GPU's time slice without recording a call.
func (f *FakeHost) SetTimeSliceState(uuid string, v int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state.TimeSlices[uuid] = v
}

// KillDaemon makes a running MPS daemon die, as it does with the plugin's container, without
// recording a call.
func (f *FakeHost) KillDaemon(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.state.Daemons, id)
}

// HideTimeSlice makes TimeSlice report that the value cannot be read, as nvidia-smi does.
func (f *FakeHost) HideTimeSlice() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.known = false
}

// FailOn makes the call with this exact description (as Calls lists it, e.g.
// "SetComputeMode GPU-1 EXCLUSIVE_PROCESS" or "Start mps-id") return err.
func (f *FakeHost) FailOn(call string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failOn[call] = err
}

// State returns a copy of the host state.
func (f *FakeHost) State() HostState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return HostState{ComputeModes: maps.Clone(f.state.ComputeModes), TimeSlices: maps.Clone(f.state.TimeSlices),
		Daemons: maps.Clone(f.state.Daemons), Mounts: maps.Clone(f.state.Mounts)}
}

// Calls returns the calls made so far, in order.
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

func (f *FakeHost) device(uuid string) error {
	if !f.devices[uuid] {
		return fmt.Errorf("no device %s", uuid)
	}
	return nil
}

// TimeSlice implements sharing.TimeSlicer.
func (f *FakeHost) TimeSlice(ctx context.Context, uuid string) (int, bool, error) {
	if err := f.begin(ctx, false, "TimeSlice %s", uuid); err != nil {
		return 0, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.device(uuid); err != nil {
		return 0, false, err
	}
	return f.state.TimeSlices[uuid], f.known, nil
}

// SetTimeSlice implements sharing.TimeSlicer.
func (f *FakeHost) SetTimeSlice(ctx context.Context, uuid string, v int) error {
	if err := f.begin(ctx, true, "SetTimeSlice %s %d", uuid, v); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.device(uuid); err != nil {
		return err
	}
	if !strings.HasPrefix(uuid, "GPU-") {
		return fmt.Errorf("time slices are set on full GPUs, not on %s", uuid)
	}
	f.state.TimeSlices[uuid] = v
	return nil
}

// ComputeMode implements sharing.ComputeModeSetter.
func (f *FakeHost) ComputeMode(ctx context.Context, uuid string) (sharing.ComputeMode, error) {
	if err := f.begin(ctx, false, "ComputeMode %s", uuid); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.device(uuid); err != nil {
		return 0, err
	}
	return f.state.ComputeModes[uuid], nil
}

// SetComputeMode implements sharing.ComputeModeSetter.
func (f *FakeHost) SetComputeMode(ctx context.Context, uuid string, m sharing.ComputeMode) error {
	if err := f.begin(ctx, true, "SetComputeMode %s %s", uuid, m); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.device(uuid); err != nil {
		return err
	}
	f.state.ComputeModes[uuid] = m
	return nil
}

// Start implements sharing.MPSDaemons. Like the real daemon setup, it needs every device in
// compute mode EXCLUSIVE_PROCESS.
func (f *FakeHost) Start(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	if err := f.begin(ctx, true, "Start %s", spec.ID); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range spec.DeviceUUIDs {
		if err := f.device(u); err != nil {
			return err
		}
		if f.state.ComputeModes[u] != sharing.ComputeModeExclusiveProcess {
			return fmt.Errorf("device %s is in compute mode %s, want EXCLUSIVE_PROCESS", u, f.state.ComputeModes[u])
		}
	}
	f.state.Daemons[spec.ID] = spec
	if spec.ShmDir != "" {
		if _, ok := f.state.Mounts[spec.ShmDir]; !ok {
			f.state.Mounts[spec.ShmDir] = cmp.Or(spec.ShmSizeBytes, sharing.DefaultMPSShmSize)
		}
	}
	return nil
}

// Ready implements sharing.MPSDaemons.
func (f *FakeHost) Ready(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	if err := f.begin(ctx, false, "Ready %s", spec.ID); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.state.Daemons[spec.ID]; !ok {
		return fmt.Errorf("MPS control daemon %s does not run", spec.ID)
	}
	return nil
}

// Stop implements sharing.MPSDaemons.
func (f *FakeHost) Stop(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	if err := f.begin(ctx, true, "Stop %s", spec.ID); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.state.Daemons, spec.ID)
	delete(f.state.Mounts, spec.ShmDir)
	return nil
}

// Running implements sharing.MPSDaemons.
func (f *FakeHost) Running(ctx context.Context, spec sharing.MPSDaemonSpec) (bool, error) {
	if err := f.begin(ctx, false, "Running %s", spec.ID); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.state.Daemons[spec.ID]
	return ok, nil
}

// Mount implements sharing.Mounter: it records a tmpfs of sizeBytes on target (the directory
// need not exist), so that MPSControl can be tested without privileges.
func (f *FakeHost) Mount(ctx context.Context, target string, sizeBytes int64) error {
	if err := f.begin(ctx, true, "Mount %s %d", target, sizeBytes); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if sizeBytes <= 0 {
		return fmt.Errorf("tmpfs on %s: size %d bytes: the size must be positive", target, sizeBytes)
	}
	if _, ok := f.state.Mounts[target]; !ok {
		f.state.Mounts[target] = sizeBytes
	}
	return nil
}

// Unmount implements sharing.Mounter.
func (f *FakeHost) Unmount(ctx context.Context, target string) error {
	if err := f.begin(ctx, true, "Unmount %s", target); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.state.Mounts, target)
	return nil
}
