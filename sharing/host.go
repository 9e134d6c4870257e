package sharing

import "context"

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
	// Start starts the daemon described by spec (creating its directories) and applies its
	// default limits. Starting a daemon that already runs is not an error.
	Start(ctx context.Context, spec MPSDaemonSpec) error
	// Ready waits until the daemon accepts clients, or fails when it does not in time.
	Ready(ctx context.Context, spec MPSDaemonSpec) error
	// Stop stops the daemon and removes its directories. Stopping a daemon that does not
	// run is not an error.
	Stop(ctx context.Context, spec MPSDaemonSpec) error
}

// MPSDaemonSpec describes one MPS control daemon. It is part of Record, so it is
// JSON-serializable and stable.
type MPSDaemonSpec struct {
	// ID names the daemon: the claim UID for a claim's own daemon, "shared-<hash>" for the
	// daemon of a device that several claims share.
	ID string `json:"id"`
	// DeviceUUIDs are the devices the daemon serves, in ordinal order (CUDA_VISIBLE_DEVICES).
	DeviceUUIDs []string `json:"deviceUUIDs"`
	// Dir is the daemon's host directory; PipeDir, LogDir and ShmDir are inside it.
	Dir     string `json:"dir"`
	PipeDir string `json:"pipeDir"`
	LogDir  string `json:"logDir"`
	ShmDir  string `json:"shmDir"`
	// ActiveThreadPercentage, when set, is applied with set_default_active_thread_percentage.
	ActiveThreadPercentage *int `json:"activeThreadPercentage,omitempty"`
	// PinnedMemoryLimits maps a device ordinal ("0") to a limit ("16384M"), applied with
	// set_default_device_pinned_mem_limit.
	PinnedMemoryLimits map[string]string `json:"pinnedMemoryLimits,omitempty"`
	// ClientLimit is the most MPS clients the daemon's devices accept (48, or 16 before Volta).
	ClientLimit int `json:"clientLimit"`
	// Shared says whether several claims use the daemon (devices allocated with a share ID).
	Shared bool `json:"shared,omitempty"`
}
