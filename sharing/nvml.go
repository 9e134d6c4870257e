package sharing

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLComputeMode is the ComputeModeSetter of a real host. It uses an initialized NVML
// (nvml.Interface); the caller owns Init and Shutdown. For a MIG device it works on the MIG
// device handle, as NVML requires when MIG is enabled.
type NVMLComputeMode struct {
	lib nvml.Interface
}

var _ ComputeModeSetter = (*NVMLComputeMode)(nil)

// NewNVMLComputeMode returns a ComputeModeSetter that uses lib.
func NewNVMLComputeMode(lib nvml.Interface) *NVMLComputeMode { return &NVMLComputeMode{lib: lib} }

func (n *NVMLComputeMode) device(uuid string) (nvml.Device, error) {
	if n.lib == nil {
		return nil, errors.New("sharing: NVMLComputeMode: nil nvml.Interface (see NewNVMLComputeMode)")
	}
	d, ret := n.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML DeviceGetHandleByUUID(%s): %s", uuid, nvml.ErrorString(ret))
	}
	return d, nil
}

// ComputeMode implements ComputeModeSetter.
func (n *NVMLComputeMode) ComputeMode(_ context.Context, uuid string) (ComputeMode, error) {
	d, err := n.device(uuid)
	if err != nil {
		return 0, err
	}
	m, ret := d.GetComputeMode()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("NVML GetComputeMode(%s): %s", uuid, nvml.ErrorString(ret))
	}
	return ComputeMode(m), nil
}

// SetComputeMode implements ComputeModeSetter.
func (n *NVMLComputeMode) SetComputeMode(_ context.Context, uuid string, mode ComputeMode) error {
	d, err := n.device(uuid)
	if err != nil {
		return err
	}
	if ret := d.SetComputeMode(nvml.ComputeMode(mode)); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML SetComputeMode(%s, %s): %s", uuid, mode, nvml.ErrorString(ret))
	}
	return nil
}
