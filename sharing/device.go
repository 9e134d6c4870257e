package sharing

import (
	"fmt"
	"strings"
)

// Device identifies one allocatable device on the node: a full GPU, or a MIG device inside
// one. It is plain data that the caller fills from its inventory (package gpu).
type Device struct {
	// Name is the device name in the ResourceSlice (DeviceRequestAllocationResult.Device).
	Name string `json:"name"`
	// UUID is the GPU UUID ("GPU-…") or MIG device UUID ("MIG-…").
	UUID string `json:"uuid"`
	// ParentUUID is the UUID of the physical GPU of a MIG device; empty for a full GPU.
	ParentUUID string `json:"parentUUID,omitempty"`
	// Index is the NVML index of the physical GPU.
	Index int `json:"index"`
	// IsMIG says whether this is a MIG device.
	IsMIG bool `json:"isMIG,omitempty"`
	// MemoryBytes is the device memory (of the MIG device, for a MIG device).
	MemoryBytes uint64 `json:"memoryBytes,omitempty"`
	// Planned marks a device that does not exist yet (a dynamic MIG device whose instance is
	// created later): Plan does not read its settings and assumes a new device's defaults.
	Planned bool `json:"planned,omitempty"`
}

// PhysicalUUID is the UUID of the physical GPU the device lives on.
func (d Device) PhysicalUUID() string {
	if d.IsMIG {
		return d.ParentUUID
	}
	return d.UUID
}

// String names the device for messages: `"gpu-0" (GPU GPU-…)` or `"gpu-0-mig-…" (MIG device
// MIG-… on GPU GPU-…)`.
func (d Device) String() string {
	if d.IsMIG {
		return fmt.Sprintf("%q (MIG device %s on GPU %s)", d.Name, d.UUID, d.ParentUUID)
	}
	return fmt.Sprintf("%q (GPU %s)", d.Name, d.UUID)
}

// DeviceLookup finds the device that an allocation result names (pool and device name).
type DeviceLookup func(pool, name string) (Device, bool)

// DevicesByName is a DeviceLookup over a fixed list of devices, matched by name in any pool
// (device names are unique per node).
func DevicesByName(devices ...Device) DeviceLookup {
	m := make(map[string]Device, len(devices))
	for _, d := range devices {
		m[d.Name] = d
	}
	return func(_, name string) (Device, bool) {
		d, ok := m[name]
		return d, ok
	}
}

// ComputeMode is an NVML compute mode; the values are NVML's.
type ComputeMode int

const (
	// ComputeModeDefault allows several contexts per device.
	ComputeModeDefault ComputeMode = 0
	// ComputeModeProhibited allows no context.
	ComputeModeProhibited ComputeMode = 2
	// ComputeModeExclusiveProcess allows one context per device (the MPS server's).
	ComputeModeExclusiveProcess ComputeMode = 3
)

var computeModeNames = map[ComputeMode]string{
	ComputeModeDefault:          "DEFAULT",
	1:                           "EXCLUSIVE_THREAD",
	ComputeModeProhibited:       "PROHIBITED",
	ComputeModeExclusiveProcess: "EXCLUSIVE_PROCESS",
}

// String is the nvidia-smi name of the mode (DEFAULT, EXCLUSIVE_PROCESS, …).
func (m ComputeMode) String() string {
	if s, ok := computeModeNames[m]; ok {
		return s
	}
	return fmt.Sprintf("ComputeMode(%d)", int(m))
}

// MarshalText implements encoding.TextMarshaler, so records show the name.
func (m ComputeMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *ComputeMode) UnmarshalText(b []byte) error {
	s := string(b)
	for k, v := range computeModeNames {
		if v == s {
			*m = k
			return nil
		}
	}
	var n int
	if _, err := fmt.Sscanf(strings.TrimPrefix(s, "ComputeMode"), "(%d)", &n); err == nil {
		*m = ComputeMode(n)
		return nil
	}
	return fmt.Errorf("unknown compute mode %q: supported values: DEFAULT, EXCLUSIVE_THREAD, PROHIBITED, EXCLUSIVE_PROCESS", s)
}
