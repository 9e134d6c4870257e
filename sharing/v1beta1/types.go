package v1beta1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	// GroupName is the API group of the opaque configuration kinds.
	GroupName = "resource.nvidia.com"
	// Version is the API version of this package.
	Version = "v1beta1"
	// APIVersion is the apiVersion value of the kinds in this package.
	APIVersion = GroupName + "/" + Version
	// GpuConfigKind is the kind of GpuConfig.
	GpuConfigKind = "GpuConfig"
	// MigDeviceConfigKind is the kind of MigDeviceConfig.
	MigDeviceConfigKind = "MigDeviceConfig"
)

// Config is implemented by GpuConfig and MigDeviceConfig.
type Config interface {
	runtime.Object
	// Default fills in defaults and moves deprecated field names to their current ones.
	Default()
	// Validate checks a defaulted config; its error lists every problem with its field path.
	Validate() error
	// ValidateAt is Validate with field paths rooted at root (nil: the object itself).
	ValidateAt(root *field.Path) field.ErrorList
	// Strategy is the sharing strategy, StrategyExclusive when there is no sharing section.
	Strategy() SharingStrategy
	// MPS returns the MPS settings, nil unless the strategy is MPS.
	MPS() *MpsConfig
}

var (
	_ Config = (*GpuConfig)(nil)
	_ Config = (*MigDeviceConfig)(nil)
)

// SharingStrategy says how the processes of a claim (and of other claims, where a device is
// allocated more than once) share a device.
type SharingStrategy string

const (
	// StrategyTimeSlicing lets CUDA contexts take turns on the whole GPU.
	StrategyTimeSlicing SharingStrategy = "TimeSlicing"
	// StrategyMPS runs the claim's CUDA processes under an MPS control daemon.
	StrategyMPS SharingStrategy = "MPS"
	// StrategyExclusive is not a wire value: it is what Strategy reports when a config has no
	// sharing section (the device is used as is, without any host change).
	StrategyExclusive SharingStrategy = "Exclusive"
)

// TimeSliceInterval is the time slice length for time-slicing on a full GPU.
type TimeSliceInterval string

const (
	// DefaultTimeSlice is the driver's default time slice.
	DefaultTimeSlice TimeSliceInterval = "Default"
	// ShortTimeSlice is the shortest time slice.
	ShortTimeSlice TimeSliceInterval = "Short"
	// MediumTimeSlice is a medium time slice.
	MediumTimeSlice TimeSliceInterval = "Medium"
	// LongTimeSlice is the longest time slice.
	LongTimeSlice TimeSliceInterval = "Long"
)

// Int is the value nvidia-smi compute-policy --set-timeslice takes for the interval
// (Default 0, Short 1, Medium 2, Long 3), or -1 for an unknown interval.
func (t TimeSliceInterval) Int() int {
	switch t {
	case DefaultTimeSlice:
		return 0
	case ShortTimeSlice:
		return 1
	case MediumTimeSlice:
		return 2
	case LongTimeSlice:
		return 3
	}
	return -1
}

// GpuConfig is the opaque configuration of a full GPU.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type GpuConfig struct {
	metav1.TypeMeta `json:",inline"`
	// Sharing selects a sharing strategy; nil means the GPU is used exclusively, as is.
	Sharing *GpuSharing `json:"sharing,omitempty"`
}

// GpuSharing is the sharing section of a GpuConfig.
type GpuSharing struct {
	// Strategy is TimeSlicing or MPS.
	Strategy SharingStrategy `json:"strategy"`
	// TimeSlicingConfig tunes TimeSlicing; only with strategy TimeSlicing.
	TimeSlicingConfig *TimeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	// MpsConfig tunes MPS; only with strategy MPS.
	MpsConfig *MpsConfig `json:"mpsConfig,omitempty"`
}

// MigDeviceConfig is the opaque configuration of a MIG device.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type MigDeviceConfig struct {
	metav1.TypeMeta `json:",inline"`
	// Sharing selects a sharing strategy; nil means the MIG device is used exclusively, as is.
	Sharing *MigDeviceSharing `json:"sharing,omitempty"`
}

// MigDeviceSharing is the sharing section of a MigDeviceConfig. Processes on one MIG device
// are time-sliced by the GPU already, so strategy TimeSlicing is accepted (as NVIDIA's DRA driver
// accepts it, in its default MIG config) and changes nothing on the host; the time-slice
// interval is a property of the physical GPU, so a timeSlicingConfig is rejected.
type MigDeviceSharing struct {
	// Strategy is TimeSlicing or MPS.
	Strategy SharingStrategy `json:"strategy"`
	// TimeSlicingConfig exists only to reject it with a clear message: a MIG device has no
	// time-slice interval of its own.
	TimeSlicingConfig *TimeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	// MpsConfig tunes MPS.
	MpsConfig *MpsConfig `json:"mpsConfig,omitempty"`
}

// TimeSlicingConfig tunes time-slicing.
type TimeSlicingConfig struct {
	// Interval is Default, Short, Medium or Long; defaults to Default.
	Interval *TimeSliceInterval `json:"interval,omitempty"`
	// TimeSlice is the gpu.resource.nvidia.com/v1alpha1 name of Interval.
	//
	// Deprecated: use Interval. Default moves it there; setting both is an error.
	TimeSlice *TimeSliceInterval `json:"timeSlice,omitempty"`
}

// MpsConfig tunes MPS.
type MpsConfig struct {
	// DefaultActiveThreadPercentage limits each client to this percentage (1-100) of the
	// device's multiprocessors.
	DefaultActiveThreadPercentage *int `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultPinnedDeviceMemoryLimit limits the device memory each client may pin, on every
	// device of the claim. At least 1Mi; applied in whole MiB.
	DefaultPinnedDeviceMemoryLimit *resource.Quantity `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	// DefaultPerDevicePinnedMemoryLimit overrides DefaultPinnedDeviceMemoryLimit per device.
	// A key is a device UUID ("GPU-…", "MIG-…") or the decimal index of the device among the
	// devices this config applies to, in allocation order.
	DefaultPerDevicePinnedMemoryLimit map[string]resource.Quantity `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`

	// ActiveThreadPercentage is the gpu.resource.nvidia.com/v1alpha1 name of
	// DefaultActiveThreadPercentage.
	//
	// Deprecated: use DefaultActiveThreadPercentage. Default moves it there.
	ActiveThreadPercentage *int `json:"activeThreadPercentage,omitempty"`
	// PinnedDeviceMemoryLimit is the gpu.resource.nvidia.com/v1alpha1 name of
	// DefaultPinnedDeviceMemoryLimit.
	//
	// Deprecated: use DefaultPinnedDeviceMemoryLimit. Default moves it there.
	PinnedDeviceMemoryLimit *resource.Quantity `json:"pinnedDeviceMemoryLimit,omitempty"`
	// MaxConnections existed in gpu.resource.nvidia.com/v1alpha1 and has no equivalent: the
	// MPS client limit is fixed by the GPU. Validate rejects it.
	//
	// Deprecated: remove it.
	MaxConnections *int `json:"maxConnections,omitempty"`
}

// Strategy implements Config.
func (c *GpuConfig) Strategy() SharingStrategy {
	if c.Sharing == nil {
		return StrategyExclusive
	}
	return c.Sharing.Strategy
}

// MPS implements Config.
func (c *GpuConfig) MPS() *MpsConfig {
	if c.Sharing == nil || c.Sharing.Strategy != StrategyMPS {
		return nil
	}
	return c.Sharing.MpsConfig
}

// Interval is the time slice interval of a TimeSlicing config, or "" for other strategies.
func (c *GpuConfig) Interval() TimeSliceInterval {
	if c.Sharing == nil || c.Sharing.Strategy != StrategyTimeSlicing {
		return ""
	}
	if c.Sharing.TimeSlicingConfig == nil || c.Sharing.TimeSlicingConfig.Interval == nil {
		return DefaultTimeSlice
	}
	return *c.Sharing.TimeSlicingConfig.Interval
}

// Strategy implements Config.
func (c *MigDeviceConfig) Strategy() SharingStrategy {
	if c.Sharing == nil {
		return StrategyExclusive
	}
	return c.Sharing.Strategy
}

// MPS implements Config.
func (c *MigDeviceConfig) MPS() *MpsConfig {
	if c.Sharing == nil || c.Sharing.Strategy != StrategyMPS {
		return nil
	}
	return c.Sharing.MpsConfig
}

// NewGpuConfig returns an empty GpuConfig with its apiVersion and kind set.
func NewGpuConfig() *GpuConfig {
	return &GpuConfig{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: GpuConfigKind}}
}

// NewMigDeviceConfig returns an empty MigDeviceConfig with its apiVersion and kind set.
func NewMigDeviceConfig() *MigDeviceConfig {
	return &MigDeviceConfig{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: MigDeviceConfigKind}}
}
