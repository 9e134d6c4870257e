package nvmltopology_test

import (
	"testing"

	"github.com/gpudra/gpudra/internal/nilcheck"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

// TestNilArguments: Discover and GPUs given a nil NVML returns an error instead of panicking.
func TestNilArguments(t *testing.T) {
	nilcheck.ErrorsOnly(t, map[string]func() error{
		"Discover": func() error { _, err := nvmltopology.Discover(nil); return err },
		"GPUs":     func() error { _, err := nvmltopology.GPUs(nil); return err },
	})
}
