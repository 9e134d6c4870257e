package sharing

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/klog/v2"
)

// TimeSlicer reads and sets the compute time slice of a physical GPU.
type TimeSlicer interface {
	// TimeSlice returns the GPU's current time slice value (0 Default … 3 Long). ok is false
	// when the value cannot be read on this host; Undo then restores Default.
	TimeSlice(ctx context.Context, gpuUUID string) (value int, ok bool, err error)
	// SetTimeSlice sets the time slice value (0 Default, 1 Short, 2 Medium, 3 Long).
	SetTimeSlice(ctx context.Context, gpuUUID string, value int) error
}

// ComputeModeSetter reads and sets the compute mode of a GPU or MIG device (by UUID).
type ComputeModeSetter interface {
	// ComputeMode returns the device's compute mode.
	ComputeMode(ctx context.Context, uuid string) (ComputeMode, error)
	// SetComputeMode sets the device's compute mode.
	SetComputeMode(ctx context.Context, uuid string, mode ComputeMode) error
}

// MPSDaemons runs MPS control daemons.
type MPSDaemons interface {
	// Start starts the daemon described by spec (creating its directories and mounting its
	// shm directory, a tmpfs of spec.ShmSizeBytes) and applies its default limits. Starting a
	// daemon that already runs is not an error.
	Start(ctx context.Context, spec MPSDaemonSpec) error
	// Ready waits until the daemon accepts clients, or fails when it does not in time.
	Ready(ctx context.Context, spec MPSDaemonSpec) error
	// Running says whether the daemon runs now. An error means the answer is not known.
	Running(ctx context.Context, spec MPSDaemonSpec) (bool, error)
	// Stop stops the daemon, unmounts its shm directory and removes its directories.
	// Stopping a daemon that does not run is not an error.
	Stop(ctx context.Context, spec MPSDaemonSpec) error
}

// Mounter mounts the size-bounded tmpfs of an MPS daemon's shm directory (MPSControl uses
// it). TmpfsMounter is the implementation of a real host.
type Mounter interface {
	// Mount mounts a tmpfs of at most sizeBytes on the existing directory target: writable by
	// everyone with the sticky bit, like /dev/shm, and nosuid, nodev, noexec. A target that
	// is a mount point already is left as it is.
	Mount(ctx context.Context, target string, sizeBytes int64) error
	// Unmount unmounts target. A target that is not a mount point, or does not exist, is not
	// an error.
	Unmount(ctx context.Context, target string) error
}

// DefaultMPSShmSize is the size of an MPS daemon's shm tmpfs unless WithMPSShmSize says
// otherwise: 1 GiB.
const DefaultMPSShmSize int64 = 1 << 30

// MPSDaemonSpec describes one MPS control daemon. It is part of Record, so it is
// JSON-serializable and stable.
type MPSDaemonSpec struct {
	// ID names the daemon: the claim UID for a claim's own daemon, "shared-<hash>" for the
	// daemon of a device that several claims share.
	ID string `json:"id"`
	// DeviceUUIDs are the devices the daemon serves, in ordinal order (CUDA_VISIBLE_DEVICES).
	DeviceUUIDs []string `json:"deviceUUIDs"`
	// Dir is the daemon's host directory; PipeDir, LogDir and ShmDir are inside it.
	Dir string `json:"dir"`
	// PipeDir is the daemon's pipe directory (CUDA_MPS_PIPE_DIRECTORY).
	PipeDir string `json:"pipeDir"`
	// LogDir is the daemon's log directory (CUDA_MPS_LOG_DIRECTORY).
	LogDir string `json:"logDir"`
	// ShmDir is where the tmpfs the daemon's clients share is mounted (/dev/shm in containers).
	ShmDir string `json:"shmDir"`
	// ShmSizeBytes is the size of the tmpfs mounted on ShmDir (0, in records written before
	// it existed: DefaultMPSShmSize).
	ShmSizeBytes int64 `json:"shmSizeBytes,omitempty"`
	// ActiveThreadPercentage, when set, is applied with set_default_active_thread_percentage.
	ActiveThreadPercentage *int `json:"activeThreadPercentage,omitempty"`
	// PinnedMemoryLimits maps a device ordinal ("0") to a limit ("16384M"), applied with
	// set_default_device_pinned_mem_limit.
	PinnedMemoryLimits map[string]string `json:"pinnedMemoryLimits,omitempty"`
}

// CreateDirs creates the daemon's pipe, log and shm directories as a daemon needs them: the shm
// directory world-writable and sticky like /dev/shm (MkdirAll's umask is undone).
func (s MPSDaemonSpec) CreateDirs() error {
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{s.PipeDir, 0o755}, {s.LogDir, 0o755}, {s.ShmDir, 0o777 | os.ModeSticky}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return fmt.Errorf("MPS daemon %s: %w", s.ID, err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("MPS daemon %s: %w", s.ID, err)
		}
	}
	return nil
}

// RemoveDirs removes the daemon's pipe, log and shm directories (unmount the shm tmpfs first),
// and Dir when it is empty: it may hold files this package did not write (logged, not removed).
func (s MPSDaemonSpec) RemoveDirs(logger klog.Logger) error {
	var errs []error
	for _, d := range []string{s.PipeDir, s.LogDir, s.ShmDir} {
		if d == "" {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if s.Dir != "" {
		if err := os.Remove(s.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			logger.V(2).Info("Leaving MPS daemon directory", "dir", s.Dir, "err", err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("MPS daemon %s: removing directories: %w", s.ID, err)
	}
	return nil
}
