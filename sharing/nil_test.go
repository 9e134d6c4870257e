package sharing_test

import (
	"context"
	"testing"

	"github.com/gpudra/gpudra/internal/nilcheck"
	"github.com/gpudra/gpudra/sharing"
)

// TestNilArgumentsNeverPanic: the exported entry points given a nil claim, lookup, record or NVML return
// an error instead of panicking.
func TestNilArgumentsNeverPanic(t *testing.T) {
	ctx := context.Background()
	m := sharing.NewManager("gpu.nvidia.com")
	calls := map[string]func() error{
		"Manager.Resolve": func() error { _, err := m.Resolve(nil, nil); return err },
		"Manager.Plan":    func() error { _, err := m.Plan(ctx, nil, nil); return err },
		"Manager.Prepare": func() error { _, err := m.Prepare(ctx, nil, nil); return err },
		"Manager.Undo":    func() error { return m.Undo(ctx, nil) },
		"NVMLComputeMode.SetComputeMode": func() error {
			return sharing.NewNVMLComputeMode(nil).SetComputeMode(ctx, "GPU-0", sharing.ComputeModeDefault)
		},
		"NVMLComputeMode.ComputeMode": func() error {
			_, err := sharing.NewNVMLComputeMode(nil).ComputeMode(ctx, "GPU-0")
			return err
		},
	}
	nilcheck.ErrorsOnly(t, calls)
	if got := sharing.ClaimString(nil); got == "" {
		t.Errorf("ClaimString(nil) = %q, want a placeholder", got)
	}
}
