package gpu

import "fmt"

// DeviceError is one GPU failing during enumeration (gpu/nvmlgpu.Enumerate): which GPU, which
// NVML call, and the NVML error. errors.Is(err, nvml.ERROR_GPU_IS_LOST) and the like work on it.
type DeviceError struct {
	// Index is the NVML index of the GPU.
	Index int `json:"index"`
	// UUID is the GPU's UUID when it was read before the failure, else empty: a failed GPU
	// without one may be any GPU the node had before (see Inventory.Unreadable).
	UUID string `json:"uuid,omitempty"`
	// MIGIndex is the MIG device index under the GPU when a MIG device failed, else -1.
	MIGIndex int `json:"migIndex"`
	// Op is the NVML method that failed, e.g. "GetUUID".
	Op string `json:"op"`
	// Return is the NVML error: an nvml.Return (go-nvml's error type, whose value is NVML's
	// return code) when gpu/nvmlgpu made it. It is an error so that this package, and a program
	// that only reads inventories, needs no NVML bindings; compare it with an nvml.ERROR_*
	// value, or use errors.Is on the DeviceError. JSON writes the return code.
	Return error `json:"return"`
	// Message is the error text, for JSON output.
	Message string `json:"message"`
}

// Error implements error.
func (e *DeviceError) Error() string {
	gpu := fmt.Sprintf("gpu %d", e.Index)
	if e.UUID != "" {
		gpu += " (" + e.UUID + ")"
	}
	if e.MIGIndex >= 0 {
		return fmt.Sprintf("%s: MIG device %d: %s: %v", gpu, e.MIGIndex, e.Op, e.Return)
	}
	return fmt.Sprintf("%s: %s: %v", gpu, e.Op, e.Return)
}

// Unwrap returns Return, the NVML error.
func (e *DeviceError) Unwrap() error { return e.Return }

// Unreadable reports whether the GPU with this UUID may be on the node although enumeration
// did not return it: a skipped GPU's error names it, or names no UUID at all (the GPU failed
// before its UUID was read, so it may be any GPU). A GPU that is unreadable is not absent:
// whatever was prepared on it must be kept until it can be read again.
func (inv *Inventory) Unreadable(uuid string) bool {
	if inv == nil {
		return false
	}
	for _, e := range inv.Errors {
		if e.UUID == "" || e.UUID == uuid {
			return true
		}
	}
	return false
}
