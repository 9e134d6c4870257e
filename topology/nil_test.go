package topology_test

import (
	"testing"

	"github.com/gpudra/gpudra/internal/nilcheck"
	"github.com/gpudra/gpudra/topology"
)

// TestNilArguments: the exported entry points given a nil topology return an error
// instead of panicking.
func TestNilArguments(t *testing.T) {
	calls := map[string]func() error{
		"BestSet": func() error { _, err := topology.BestSet(nil, 2, nil); return err },
	}
	nilcheck.ErrorsOnly(t, calls)
	if got := topology.Render(nil); got != "" {
		t.Errorf("Render(nil) = %q, want nothing", got)
	}
}
