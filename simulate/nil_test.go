package simulate_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/simulate"
)

// TestNilArguments: the exported entry points given a nil claim return an error (or do
// nothing) instead of panicking.
func TestNilArguments(t *testing.T) {
	sim := simulate.New("node-1", nil, nil)
	calls := map[string]func() error{
		"Simulator.Allocate": func() error { _, err := sim.Allocate(context.Background(), nil); return err },
	}
	if diff := cmp.Diff(allErrors(calls), outcomes(calls)); diff != "" {
		t.Errorf("outcome per call (-want +got):\n%s", diff)
	}
	if got := outcome(func() error { simulate.Default(nil); sim.Release(nil); return nil }); got != "no error" {
		t.Errorf("Default(nil), Release(nil): %s", got)
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
