package mig_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/mig"
)

// TestNilArguments: every exported entry point given a nil model, spec or device returns an
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
		"PlacementOrder":     func() error { _, err := mig.PlacementOrder(nil, nil, "1g.5gb"); return err },
		"Candidates":         func() error { _, err := mig.Candidates(nil, nil, "1g.5gb"); return err },
		"NewRanker":          func() error { _, err := mig.NewRanker(nil); return err },
		"CheckConfig":        func() error { _, err := mig.CheckConfig(nil, "all-balanced", nil); return err },
		"NamedConfigLayout":  func() error { _, _, err := mig.NamedConfigLayout("all-balanced", nil); return err },
		"NewInstanceManager": func() error { _, err := mig.NewInstanceManager(nil, nil); return err },
		"ModelFromDevice":    func() error { _, err := mig.ModelFromDevice(nil); return err },
		"DeviceModel":        func() error { _, _, err := mig.DeviceModel(nil); return err },
		"ListInstances":      func() error { _, err := mig.ListInstances(nil); return err },
	}
	if diff := cmp.Diff(allErrors(calls), outcomes(calls)); diff != "" {
		t.Errorf("outcome per call (-want +got):\n%s", diff)
	}
	if got := mig.Diagram(nil, nil); got == "" {
		t.Errorf("Diagram(nil model) = %q, want an invalid: line", got)
	}
}

// outcomes calls each function and says whether it returned an error, returned nil or panicked.
func outcomes(calls map[string]func() error) map[string]string {
	out := map[string]string{}
	for name, call := range calls {
		out[name] = outcome(call)
	}
	return out
}

func outcome(call func() error) (result string) {
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
