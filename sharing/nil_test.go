package sharing_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

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
	if diff := cmp.Diff(allErrors(calls), nilOutcomes(calls)); diff != "" {
		t.Errorf("outcome per call (-want +got):\n%s", diff)
	}
	if got := sharing.ClaimString(nil); got == "" {
		t.Errorf("ClaimString(nil) = %q, want a placeholder", got)
	}
}

// nilOutcomes calls each function and says whether it returned an error, returned nil or panicked.
func nilOutcomes(calls map[string]func() error) map[string]string {
	out := map[string]string{}
	for name, call := range calls {
		out[name] = nilOutcome(call)
	}
	return out
}

func nilOutcome(call func() error) (result string) {
	defer func() {
		if r := recover(); r != nil {
			result = fmt.Sprintf("panic: %v", r)
		}
	}()
	if err := call(); err != nil {
		return "error"
	}
	return "no error"
}

func allErrors(calls map[string]func() error) map[string]string {
	out := map[string]string{}
	for name := range calls {
		out[name] = "error"
	}
	return out
}
