package mig

import "fmt"

// errNilModel is the error of a function given a nil *Model.
func errNilModel(fn string) error {
	return fmt.Errorf("mig: %s: nil *Model (use Lookup, LookupPCIDeviceID or ModelFromDevice)", fn)
}

// errNilDevice is the error of a function given a nil nvml.Device.
func errNilDevice(fn string) error {
	return fmt.Errorf("mig: %s: nil nvml.Device", fn)
}
