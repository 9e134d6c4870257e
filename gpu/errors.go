package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DeviceError is one GPU failing during enumeration: which GPU, which NVML call, and the NVML
// error. errors.Is(err, nvml.ERROR_GPU_IS_LOST) and the like work on it.
type DeviceError struct {
	// Index is the NVML index of the GPU.
	Index int `json:"index"`
	// MIGIndex is the MIG device index under the GPU when a MIG device failed, else -1.
	MIGIndex int `json:"migIndex"`
	// Op is the NVML method that failed, e.g. "GetUUID".
	Op string `json:"op"`
	// Return is the NVML error code.
	Return nvml.Return `json:"return"`
	// Message is the error text, for JSON output.
	Message string `json:"message"`
}

func newDeviceError(index, migIndex int, op string, ret nvml.Return) *DeviceError {
	e := &DeviceError{Index: index, MIGIndex: migIndex, Op: op, Return: ret}
	e.Message = e.Error()
	return e
}

// Error implements error.
func (e *DeviceError) Error() string {
	if e.MIGIndex >= 0 {
		return fmt.Sprintf("gpu %d: MIG device %d: %s: %v", e.Index, e.MIGIndex, e.Op, e.Return)
	}
	return fmt.Sprintf("gpu %d: %s: %v", e.Index, e.Op, e.Return)
}

// Unwrap returns the NVML return code.
func (e *DeviceError) Unwrap() error { return e.Return }
