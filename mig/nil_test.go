package mig_test

import (
	"testing"

	"github.com/gpudra/gpudra/internal/nilcheck"
	"github.com/gpudra/gpudra/mig"
)

// TestNilArguments: every exported entry point given a nil model or spec returns an
// error instead of panicking.
func TestNilArguments(t *testing.T) {
	calls := map[string]func() error{
		"Validate":       func() error { _, err := mig.Validate(nil, nil); return err },
		"Layouts":        func() error { _, err := mig.Layouts(nil); return err },
		"MaximalLayouts": func() error { _, err := mig.MaximalLayouts(nil); return err },
		"CountLayouts":   func() error { _, _, err := mig.CountLayouts(nil); return err },
		"Plan":           func() error { _, err := mig.Plan(nil, nil, []string{"1g.5gb"}); return err },
		"PlacementCost": func() error {
			_, _, err := mig.PlacementCost(nil, nil, "1g.5gb", mig.Placement{})
			return err
		},
		"PlacementOrder":    func() error { _, err := mig.PlacementOrder(nil, nil, "1g.5gb"); return err },
		"Candidates":        func() error { _, err := mig.Candidates(nil, nil, "1g.5gb"); return err },
		"NewRanker":         func() error { _, err := mig.NewRanker(nil); return err },
		"CheckConfig":       func() error { _, err := mig.CheckConfig(nil, "all-balanced", nil); return err },
		"NamedConfigLayout": func() error { _, _, err := mig.NamedConfigLayout("all-balanced", nil); return err },
	}
	nilcheck.ErrorsOnly(t, calls)
	if got := mig.Diagram(nil, nil); got == "" {
		t.Errorf("Diagram(nil model) = %q, want an invalid: line", got)
	}
}
