package nvmlgpu_test

import (
	"context"
	"testing"

	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/internal/nilcheck"
)

// TestNilArguments: the exported entry points given a nil NVML return an error instead of
// panicking.
func TestNilArguments(t *testing.T) {
	calls := map[string]func() error{
		"Enumerate": func() error { _, err := nvmlgpu.Enumerate(context.Background(), nil); return err },
		"Open":      func() error { _, err := nvmlgpu.Open(nil); return err },
	}
	nilcheck.ErrorsOnly(t, calls)
}
