package simulate_test

import (
	"context"
	"testing"

	"github.com/gpudra/gpudra/internal/nilcheck"
	"github.com/gpudra/gpudra/simulate"
)

// TestNilArguments: the exported entry points given a nil claim return an error (or do
// nothing) instead of panicking.
func TestNilArguments(t *testing.T) {
	sim := simulate.New("node-1", nil, nil)
	calls := map[string]func() error{
		"Simulator.Allocate": func() error { _, err := sim.Allocate(context.Background(), nil); return err },
	}
	nilcheck.ErrorsOnly(t, calls)
	if got := nilcheck.Outcome(func() error { simulate.Default(nil); sim.Release(nil); return nil }); got != "no error" {
		t.Errorf("Default(nil), Release(nil): %s", got)
	}
}
