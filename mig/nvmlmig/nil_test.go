package nvmlmig_test

import (
	"testing"

	"github.com/gpudra/gpudra/internal/nilcheck"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

// TestNilArguments: every exported entry point given a nil device returns an error instead of
// panicking.
func TestNilArguments(t *testing.T) {
	calls := map[string]func() error{
		"NewInstanceManager":   func() error { _, err := nvmlmig.NewInstanceManager(nil, nil); return err },
		"ModelFromDevice":      func() error { _, err := nvmlmig.ModelFromDevice(nil); return err },
		"DeviceModel":          func() error { _, _, err := nvmlmig.DeviceModel(nil); return err },
		"ListInstances":        func() error { _, err := nvmlmig.ListInstances(nil); return err },
		"ListEnabledInstances": func() error { _, err := nvmlmig.ListEnabledInstances(nil); return err },
	}
	nilcheck.ErrorsOnly(t, calls)
}
