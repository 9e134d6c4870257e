package mig

import "fmt"

// errNilModel is the error of a function given a nil *Model.
func errNilModel(fn string) error {
	return fmt.Errorf("mig: %s: nil *Model (use Lookup, LookupPCIDeviceID or mig/nvmlmig.DeviceModel)", fn)
}
